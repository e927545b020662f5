"""The one boundary to the Docker engine: a shared client, thread pools, retries, translation.

The SDK blocks, so every call runs in a pool of its own (asyncio's default pool has only
cpu+4 threads). Short calls and long ones (an exec that lasts as long as the agent works, an
image build) use separate pools, so however many agents run, a signal or a removal never
waits for a free thread. Transient failures of idempotent calls are retried a bounded number
of times; a 404 or 409 means something and is passed on at once; a command is never run
twice. Engine errors leave this module as `SandboxError`s, so callers never parse messages.

`call` retries, `call_once` never does (an exec, a build). Every engine stream
(`archive_chunks`, `exec_output`) is closed when its `with` ends, however the reading stopped:
an open one keeps the container busy and its removal blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.transport.unixconn import UnixHTTPAdapter
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from orchestrator.common.errors import SandboxConflictError, SandboxError, SandboxNotFoundError
from orchestrator.sandbox.engine_calls import count, in_context

T = TypeVar("T")
_TRANSPORT_ERRORS = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)

SHORT_POOL_SIZE = 64
LONG_POOL_SIZE = 1024  # threads parked on a socket read: cheap, and bounded by live trials
_short = ThreadPoolExecutor(max_workers=SHORT_POOL_SIZE, thread_name_prefix="trialbox-docker")
_long = ThreadPoolExecutor(max_workers=LONG_POOL_SIZE, thread_name_prefix="trialbox-long")


@functools.cache
def docker_client() -> docker.DockerClient:
    """One client per process, with a connection pool for both thread pools."""
    try:
        client = docker.from_env(max_pool_size=SHORT_POOL_SIZE + LONG_POOL_SIZE, timeout=300)
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"the Docker engine does not answer ({exc}); start it, e.g. scripts/ensure-docker.sh"
        ) from exc
    send = client.api.send

    def counted_send(request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        count(request_kind(request.method or "", request.path_url))
        return send(request, **kwargs)

    client.api.send = counted_send  # every request to the engine passes here
    _one_pool(client.api)
    return client


def _one_pool(api: docker.APIClient) -> None:
    """One connection pool for the engine's unix socket, whatever the request's URL, and no
    proxy lookup for it.

    The SDK's unix-socket adapter keys its pools by the whole URL: every container, exec and
    query string gets a pool of its own, made with all `max_pool_size` slots filled and, past
    25 pools, another one closed and drained, slot by slot under a lock. At 1,088 slots that
    is about 2 ms of held GIL per new URL (an exec alone has three), which the event loop
    waits out. Every URL reaches the same socket, so one pool serves them, its connections
    kept alive across URLs."""
    adapter = api.get_adapter(api.base_url)
    if isinstance(adapter, UnixHTTPAdapter):
        by_url = adapter.get_connection
        adapter.get_connection = lambda _url, proxies=None: by_url(api.base_url, proxies)
        # No proxy stands between this process and a unix socket, yet requests reads the
        # proxy variables (the whole environment) for every request: about a quarter of its CPU.
        api.trust_env = False


_ID_AT = {"containers": 1, "exec": 1, "networks": 1, "volumes": 1}
_NOT_IDS = frozenset({"create", "json", "prune"})


def request_kind(method: str, path_url: str) -> str:
    """What a request to the engine is, without its ids: `POST /containers/{id}/start`."""
    parts = path_url.split("?", 1)[0].strip("/").split("/")
    if parts and parts[0].startswith("v1."):
        parts = parts[1:]  # the API version
    if len(parts) >= 2 and parts[0] == "images" and parts[1] not in _NOT_IDS:
        last = parts[-1] if len(parts) > 2 else ""
        parts = ["images", "{name}", *([last] if last in ("json", "push", "tag") else [])]
    elif len(parts) >= 2 and _ID_AT.get(parts[0]) == 1 and parts[1] not in _NOT_IDS:
        parts[1] = "{id}"
    return f"{method} /{'/'.join(parts)}"


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _TRANSPORT_ERRORS):
        return True
    if isinstance(exc, docker.errors.APIError) and exc.status_code is not None:
        return exc.status_code >= 500
    return False


_retrying = retry(
    retry=retry_if_exception(_is_transient),
    stop=stop_after_attempt(3),
    wait=wait_exponential(multiplier=0.2, max=2.0),
    reraise=True,
)


def translate(exc: BaseException, what: str) -> SandboxError:
    """Map an SDK or transport error onto our tree, keeping the engine's words."""
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, docker.errors.NotFound):
        return SandboxNotFoundError(f"{what}: not found ({exc.explanation or exc})")
    if isinstance(exc, docker.errors.APIError) and exc.status_code == 409:
        return SandboxConflictError(f"{what}: conflict: {exc.explanation or exc}")
    if isinstance(exc, docker.errors.APIError):
        return SandboxError(f"{what}: engine error {exc.status_code}: {exc.explanation or exc}")
    if isinstance(exc, requests.exceptions.RequestException):
        return SandboxError(f"{what}: the Docker engine did not answer ({exc})")
    return SandboxError(f"{what}: {type(exc).__name__}: {exc}")


async def in_thread(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a short blocking call in the short pool, without retry or translation."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_short, in_context(fn, *args, **kwargs))


async def call(what: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run an idempotent engine call off the loop, retrying transient errors, translating all."""
    try:
        return await in_thread(_retrying(fn), *args, **kwargs)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise translate(exc, what) from exc


async def call_once(what: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a long or non-idempotent engine call (an exec, a build) once, in the long pool."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_long, in_context(fn, *args, **kwargs))
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise translate(exc, what) from exc


# -- streams --------------------------------------------------------------------------------
# An engine response left open keeps its container busy: the engine will not remove it (for
# trialbox or an outside `docker rm -f`) until the connection goes. Every stream is opened by
# these and closed when its `with` ends, however the reading stopped (issue 18 item 5).


@contextlib.contextmanager
def archive_chunks(container_id: str, path: str, chunk_size: int) -> Iterator[Iterator[bytes]]:
    """The tar of `path` in the container, as chunks; its response is closed on leaving.

    The request is `get_archive`'s own (docker-py 7), opened here because `get_archive`
    hands back a generator whose response no caller can close."""
    api = docker_client().api
    response = api._get(
        api._url("/containers/{0}/archive", container_id),
        params={"path": path},
        stream=True,
        headers={"Accept-Encoding": "identity"},
    )
    try:
        api._raise_for_status(response)
        yield response.iter_content(chunk_size, False)
    finally:
        response.close()


@contextlib.contextmanager
def exec_output(exec_id: str) -> Iterator[Iterator[bytes]]:
    """Start an exec and yield its output, stdout and stderr together; closed on leaving."""
    stream = docker_client().api.exec_start(exec_id, stream=True)
    try:
        yield stream
    finally:
        try:
            stream.close()
        except docker.errors.DockerException:  # an SSH engine's channel: docker-py 7 cannot
            stream._response.close()  # shut it down, so the response is closed instead
