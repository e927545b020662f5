"""The server's promises over HTTP: a bounded body and metadata, cancel authorized by token
and tenant prefix, an idempotent submit, tombstones (a cancel that overtakes its submit, an
abort's scope), the long poll, and the routes spelled as in the seed's clients.

Each test drives `create_app` through httpx's ASGI transport against the real Docker engine,
except one that runs `trialbox serve` on 127.0.0.1 to show the body limit on a real socket.
Quick rollouts are `nop` on the example task; long ones `command:sleep 60`, always
cancelled. Tests wait on states (a status, a running sandbox, a long poll held), never on
sleeps, and the engine's clock is stepped instead of waiting out a window.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from orchestrator import TrialConfig
from orchestrator.cli.serve import tenant_tokens
from orchestrator.common.ids import trial_id_for
from orchestrator.service.abort import abort
from orchestrator.service.engine import TrialEngine
from orchestrator.service.rollouts import (
    MAX_BODY_BYTES,
    MAX_METADATA_BYTES,
    RolloutFinished,
    RolloutRequest,
    RolloutTombstoned,
)
from orchestrator.service.server import create_app
from tests.service.conftest import (
    HELLO,
    LONG,
    TERMINAL,
    MakeEngine,
    open_app,
    our_container_names,
    read_response,
    until_sandbox_up,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
RETENTION_SEC = 600.0  # stepped over with the clock, never waited for
ADMIN = "admin-s3cret"
TENANTS = {"tenant-a::": "token-a", "tenant-b::": "token-b"}


class StepClock:
    """The engine's monotonic clock: real time plus `offset`, which a test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60
    )


async def submit(client: httpx.AsyncClient, rollout_id: str, route: str = "/rollouts",
                 **fields: Any) -> httpx.Response:  # fmt: skip
    return await client.post(route, json={"rollout_id": rollout_id, **fields})


async def accepted(client: httpx.AsyncClient, rollout_id: str, **fields: Any) -> None:
    response = await submit(client, rollout_id, **fields)
    assert response.status_code == 202, response.text
    assert response.json() == {"rollout_id": rollout_id, "status": "queued"}


async def status_of(client: httpx.AsyncClient, rollout_id: str, **params: Any) -> dict[str, Any]:
    response = await client.get(f"/rollouts/{rollout_id}", params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def until_status(
    client: httpx.AsyncClient, rollout_id: str, wanted: set[str], within: float = 60.0
) -> dict[str, Any]:
    """Long-poll the status document until it is one of `wanted` (a terminal one once it is
    settled, with finished_at); bounded by `within`."""
    deadline = time.monotonic() + within
    doc = await status_of(client, rollout_id)
    while True:
        settled = doc["status"] not in TERMINAL or doc["finished_at"] is not None
        if doc["status"] in wanted and settled:
            return doc
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{rollout_id} is still {doc['status']!r}; wanted {wanted}")
        doc = await status_of(client, rollout_id, wait=min(5.0, left))


async def until_long_polls(engine: TrialEngine, count: int, within: float = 10.0) -> None:
    """The engine holds `count` long polls (the request under test is waiting)."""
    deadline = time.monotonic() + within
    while engine.long_polls != count:
        assert time.monotonic() < deadline, f"{engine.long_polls} long polls, wanted {count}"
        await asyncio.sleep(0.01)


async def cancel_as(client: httpx.AsyncClient, body: dict[str, Any], token: str | None = None,
                    route: str = "/rollouts/cancel") -> httpx.Response:  # fmt: skip
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return await client.post(route, json=body, headers=headers)


async def cancelled(client: httpx.AsyncClient, body: dict[str, Any], token: str | None = None,
                    route: str = "/rollouts/cancel") -> dict[str, str]:  # fmt: skip
    response = await cancel_as(client, body, token, route)
    assert response.status_code == 200, response.text
    return response.json()["dispositions"]


async def until_cancelled(client: httpx.AsyncClient, *rollout_ids: str) -> None:
    """Each of these has settled as cancelled (a cancel answers before its teardown ends)."""
    for rollout_id in rollout_ids:
        assert (await until_status(client, rollout_id, TERMINAL))["status"] == "cancelled"


async def held_blocker(client: httpx.AsyncClient, docker_client: docker.DockerClient,
                       engine: TrialEngine, rollout_id: str) -> None:  # fmt: skip
    """A long rollout holding the engine's only slot, its sandbox up: later ones queue."""
    await accepted(client, rollout_id, agent=LONG)
    await until_status(client, rollout_id, {"running"})
    await until_sandbox_up(docker_client, engine, rollout_id)


def trial_dirs(config: TrialConfig, engine: TrialEngine) -> list[Path]:
    """The job folder's trial folders (its lock file is not one)."""
    return sorted(p for p in (config.jobs_dir / engine.job_id).glob("*") if p.is_dir())


# -- 1. sizes --------------------------------------------------------------------------------


class CountedBody:
    """A request body streamed in `chunk`-byte pieces; counts the pieces the server pulled."""

    def __init__(self, chunk: int, pieces: int) -> None:
        self.chunk, self.pieces, self.pulled = chunk, pieces, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.pieces):
            self.pulled += 1
            yield b" " * self.chunk


async def test_a_declared_body_over_the_limit_is_413_before_any_of_it_is_read(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine()
    async with client_for(create_app(engine)) as client:
        for route in ("/rollouts", "/rollout", "/rollouts/cancel", "/rollout/cancel"):
            body = CountedBody(64 << 10, 160)  # 10 MiB, declared up front
            response = await client.post(
                route, content=body,
                headers={"content-type": "application/json", "content-length": str(10 << 20)},
            )  # fmt: skip
            assert response.status_code == 413, response.text
            assert str(MAX_BODY_BYTES) in response.json()["detail"]
            assert body.pulled == 0, route  # answered on the header alone
        assert engine.live_count == 0


async def test_a_streamed_body_is_cut_at_the_limit_and_one_at_the_limit_passes(
    make_engine: MakeEngine,
) -> None:
    limit = 64 << 10
    engine = make_engine()
    async with client_for(create_app(engine, max_body_bytes=limit)) as client:
        body = CountedBody(8 << 10, 128)  # 1 MiB, chunked: no Content-Length
        response = await client.post(
            "/rollouts", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 413, response.text
        assert f"the limit of {limit} bytes" in response.json()["detail"]
        assert body.pulled <= limit // (8 << 10) + 1  # read no further than the limit

        def padded(size: int) -> bytes:
            shell = {"rollout_id": "size-1", "agent": "not-offered", "prompt": ""}
            pad = size - len(json.dumps(shell).encode())
            return json.dumps({**shell, "prompt": "p" * pad}).encode()

        at_limit = await client.post(
            "/rollouts", content=padded(limit), headers={"content-type": "application/json"}
        )
        assert at_limit.status_code == 422, at_limit.text  # read whole, then judged on its merits
        assert "not offered" in at_limit.text
        over = await client.post(
            "/rollouts", content=padded(limit + 1), headers={"content-type": "application/json"}
        )
        assert over.status_code == 413, over.text
        assert engine.live_count == 0


async def test_metadata_over_its_cap_is_413_naming_the_limit(make_engine: MakeEngine) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        blob = {"blob": "x" * MAX_METADATA_BYTES}  # a body well under 1 MiB
        response = await submit(client, "meta-big", metadata=blob)
        assert response.status_code == 413, response.text
        assert f"the limit is {MAX_METADATA_BYTES} bytes" in response.json()["detail"]
        assert (await status_of(client, "meta-big"))["status"] == "unknown"

    cap = 100
    engine = make_engine()
    async with client_for(open_app(engine, max_metadata_bytes=cap)) as client:
        exact = {"k": "é" * ((cap - len('{"k":""}')) // 2)}  # counted as UTF-8 bytes
        size = len(json.dumps(exact, separators=(",", ":"), ensure_ascii=False).encode())
        assert size == cap
        await accepted(client, "meta-at-cap", metadata=exact)
        over = await submit(client, "meta-over", metadata={"k": "é" * 50, "z": 1})
        assert over.status_code == 413, over.text
        assert "the limit is 100 bytes" in over.json()["detail"]
        doc = await until_status(client, "meta-at-cap", TERMINAL)
        assert doc["status"] == "success"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(tmp_path: Path, *args: str) -> Iterator[int]:
    """`trialbox serve ARGS` on 127.0.0.1 at a free port, answering /healthz; killed after."""
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve", "--task", str(HELLO),
             "--agent", "nop", "--jobs-dir", str(tmp_path / "jobs"), *args,
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def test_the_real_server_answers_413_before_reading_a_declared_or_streamed_body(
    tmp_path: Path, docker_ready: docker.DockerClient
) -> None:
    limit = 65536
    with serving(tmp_path, "--max-body-bytes", str(limit)) as port:
        # Declared: only the head is sent; the answer comes without a byte of the body.
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            conn.sendall(
                b"POST /rollouts HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000000000\r\n\r\n"
            )
            answer = read_response(conn)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert str(limit).encode() in answer

        # Streamed: chunks go out until the answer is there; the body never ends.
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            conn.sendall(
                b"POST /rollout HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b"2000\r\n" + b" " * 0x2000 + b"\r\n"  # 8 KiB
            sent = 0
            while sent < 16 << 20:
                readable, _, _ = select.select([conn], [], [], 0.05)
                if readable:
                    break
                try:
                    conn.sendall(chunk)
                except OSError:  # the server answered and closed: read what it said
                    break
                sent += 0x2000
            answer = read_response(conn)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert sent > limit  # it waited for the limit to be passed, then answered

        # A small request on a fresh connection is served as usual.
        ok = httpx.get(f"http://127.0.0.1:{port}/rollouts/nothing-here")
        assert (ok.status_code, ok.json()["status"]) == (200, "unknown")


# -- 2. cancel authorization -----------------------------------------------------------------


async def test_without_tokens_every_selector_is_open_and_sessions_can_be_cancelled(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=1)
    async with client_for(open_app(engine)) as client:
        await held_blocker(client, docker_client, engine, "open-blocker")
        await accepted(client, "open-1", session_id="sess-open")
        await accepted(client, "open-2", session_id="sess-other")
        await accepted(client, "open-3", session_id="sess-open")
        bogus = {"Authorization": "Bearer anything"}  # ignored: there is nothing to check
        response = await client.post(
            "/rollouts/cancel", json={"session_id": "sess-open"}, headers=bogus
        )
        assert response.json()["dispositions"] == {
            "open-1": "cancelled_queued",
            "open-3": "cancelled_queued",
        }
        await until_cancelled(client, "open-1", "open-3")
        assert (await status_of(client, "open-2"))["status"] == "queued"
        assert await cancelled(client, {"prefix": "open-2"}) == {"open-2": "cancelled_queued"}
        await until_cancelled(client, "open-2")
        assert await cancelled(client, {"all": True}) == {"open-blocker": "cancelled_running"}
        await until_cancelled(client, "open-blocker")
        for body in ({"session_id": "s", "ids": ["x"]}, {"session_id": ""}, {"session_id": None}):
            assert (await cancel_as(client, body)).status_code == 422, body
    assert our_container_names(docker_client, config) == []


async def test_tenant_tokens_cancel_only_within_their_prefix_and_the_admin_everything(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=1)
    app = open_app(engine, admin_token=ADMIN, tenant_tokens=TENANTS)
    async with client_for(app) as client:
        await held_blocker(client, docker_client, engine, "zz-blocker")
        queued = {
            "tenant-a::1": "s1", "tenant-a::2": "s2", "tenant-a::3": "s1",
            "tenant-b::1": "s1", "tenant-b::2": "s2",
        }  # fmt: skip
        for rollout_id, session in queued.items():
            await accepted(client, rollout_id, session_id=session)

        # Any token configured: no token, or one that is none of them, is 401 for every selector.
        selectors = [{"ids": ["tenant-a::1"]}, {"prefix": "tenant-a::"}, {"session_id": "s1"},
                     {"all": True}]  # fmt: skip
        for body in selectors:
            for header in (None, "Bearer wrong", f"Basic {ADMIN}", ADMIN, "Bearer "):
                headers = {} if header is None else {"Authorization": header}
                refused = await client.post("/rollouts/cancel", json=body, headers=headers)
                assert refused.status_code == 401, (body, header, refused.text)
                assert refused.headers["WWW-Authenticate"] == "Bearer"

        # A tenant's token: outside its prefix is 403, and nothing is cancelled.
        for body in (
            {"ids": ["tenant-b::1"]},
            {"ids": ["tenant-a::1", "tenant-b::1"]},
            {"ids": ["zz-blocker"]},
            {"prefix": "tenant-b::"},
            {"prefix": "tenant-"},
            {"prefix": "t"},
            {"all": True},
        ):
            refused = await cancel_as(client, body, "token-a")
            assert refused.status_code == 403, (body, refused.text)
            assert "tenant-a::" in refused.json()["detail"]
        for rollout_id in queued:
            assert (await status_of(client, rollout_id))["status"] == "queued"
        # ... and an id outside it was not tombstoned either.
        assert (await status_of(client, "tenant-b::never"))["status"] == "unknown"
        assert (await cancel_as(client, {"ids": ["tenant-b::never"]}, "token-a")).status_code == 403
        assert (await status_of(client, "tenant-b::never"))["status"] == "unknown"

        # Within it: a session cancel touches only the tenant's own rollouts of that session.
        assert await cancelled(client, {"session_id": "s1"}, "token-a") == {
            "tenant-a::1": "cancelled_queued",
            "tenant-a::3": "cancelled_queued",
        }
        await until_cancelled(client, "tenant-a::1", "tenant-a::3")
        assert (await status_of(client, "tenant-b::1"))["status"] == "queued"  # same session
        assert await cancelled(client, {"prefix": "tenant-a::2"}, "token-a") == {
            "tenant-a::2": "cancelled_queued"
        }
        assert await cancelled(client, {"ids": ["tenant-b::1"]}, "token-b") == {
            "tenant-b::1": "cancelled_queued"
        }
        await until_cancelled(client, "tenant-a::2", "tenant-b::1")
        # Through the alias too; the admin may use every selector.
        assert await cancelled(client, {"session_id": "s2"}, ADMIN, "/rollout/cancel") == {
            "tenant-b::2": "cancelled_queued"
        }
        await until_cancelled(client, "tenant-b::2")
        assert await cancelled(client, {"all": True}, ADMIN) == {"zz-blocker": "cancelled_running"}
        await until_cancelled(client, "zz-blocker")
    assert our_container_names(docker_client, config) == []


async def test_an_admin_token_alone_guards_ids_prefix_and_session_too(
    make_engine: MakeEngine,
) -> None:
    async with client_for(open_app(make_engine(), admin_token=f" {ADMIN}\n")) as client:
        for body in ({"ids": ["x"]}, {"prefix": "x"}, {"session_id": "x"}, {"all": True}):
            assert (await cancel_as(client, body)).status_code == 401, body
            assert (await cancel_as(client, body, "token-a")).status_code == 401, body
            assert (await cancel_as(client, body, ADMIN)).status_code == 200, body


def test_tenant_tokens_are_checked_when_the_server_is_made(make_engine: MakeEngine) -> None:
    engine = make_engine()
    for tenants, admin in (
        ({"tenant-a::": "same", "tenant-b::": "same"}, None),  # one token, two holders
        ({"tenant-a::": ADMIN}, ADMIN),  # a tenant holding the admin's token
        ({"::no": "t"}, None),  # cannot start a rollout id
        ({"a b": "t"}, None),
        ({"tenant-a::": "  "}, None),
    ):
        with pytest.raises(ValueError):
            create_app(engine, admin_token=admin, tenant_tokens=tenants)

    assert tenant_tokens("p1=t1, p2=t=2", ["p3=t3"]) == {"p1": "t1", "p2": "t=2", "p3": "t3"}
    assert tenant_tokens(None, []) == {}
    for env, flags in (("p1=t1", ["p1=t2"]), ("just-a-token", []), ("", ["p1="])):
        with pytest.raises(ValueError) as refused:
            tenant_tokens(env, flags)
        assert "just-a-token" not in str(refused.value)  # a malformed pair is never echoed


# -- 3. idempotent submit --------------------------------------------------------------------


async def test_a_retried_submit_of_a_finished_rollout_answers_its_outcome_and_does_not_rerun(
    make_engine: MakeEngine, config: TrialConfig
) -> None:
    clock = StepClock()
    engine = make_engine(retention_sec=RETENTION_SEC, clock=clock)
    async with client_for(open_app(engine)) as client:
        await accepted(client, "idem-1")
        done = await until_status(client, "idem-1", TERMINAL)
        assert done["status"] == "success"
        for route in ("/rollouts", "/rollout"):
            again = await submit(client, "idem-1", route)
            assert again.status_code == 200, again.text
            assert again.json() == done
        assert engine.live_count == 0
        assert [p.name for p in trial_dirs(config, engine)] == ["idem-1"]  # ran once

        with pytest.raises(RolloutFinished) as finished:
            await engine.submit(RolloutRequest(rollout_id="idem-1"))
        assert finished.value.status is not None
        assert finished.value.status.model_dump(mode="json") == done

        clock.offset = RETENTION_SEC + 1  # past retention the id is forgotten
        assert (await status_of(client, "idem-1"))["status"] == "unknown"


async def test_a_retried_submit_of_a_live_rollout_is_409_with_its_live_status(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        await accepted(client, "idem-live", agent=LONG)
        await until_sandbox_up(docker_client, engine, "idem-live")
        for route in ("/rollouts", "/rollout"):
            again = await submit(client, "idem-live", route, agent=LONG)
            assert again.status_code == 409, again.text
            assert again.json()["status"] == "running"
            assert "still in flight" in again.json()["detail"]
        assert await cancelled(client, {"ids": ["idem-live"]}) == {"idem-live": "cancelled_running"}
        assert (await until_status(client, "idem-live", TERMINAL))["status"] == "cancelled"
    assert our_container_names(docker_client, config) == []


# -- 4. tombstones ---------------------------------------------------------------------------


async def test_a_cancel_that_overtakes_its_submit_refuses_the_late_submit(
    make_engine: MakeEngine, config: TrialConfig
) -> None:
    clock = StepClock()
    engine = make_engine(retention_sec=RETENTION_SEC, clock=clock)
    async with client_for(open_app(engine)) as client:
        assert await cancelled(client, {"ids": ["late-1"]}) == {"late-1": "not_found"}
        doc = await status_of(client, "late-1")
        assert doc["status"] == "cancelled" and doc["finished_at"] is not None
        assert "before it was submitted" in doc["error"]

        for route in ("/rollouts", "/rollout", "/rollouts"):  # a retry is refused alike
            late = await submit(client, "late-1", route)
            assert late.status_code == 409, late.text
            assert late.json()["status"] == "cancelled"
            assert "will not run" in late.json()["detail"]
            assert "cancelled by id before it was submitted" in late.json()["detail"]
        assert engine.live_count == 0 and trial_dirs(config, engine) == []
        with pytest.raises(RolloutTombstoned):
            await engine.submit(RolloutRequest(rollout_id="late-1"))

        # A finished rollout is not tombstoned by a cancel: it keeps its outcome.
        await accepted(client, "done-1")
        done = await until_status(client, "done-1", TERMINAL)
        assert await cancelled(client, {"ids": ["done-1"]}) == {"done-1": "not_found"}
        assert await status_of(client, "done-1") == done

        # The tombstone lasts the retention window; then the id is free again.
        clock.offset = RETENTION_SEC + 1
        assert (await status_of(client, "late-1"))["status"] == "unknown"
        await accepted(client, "late-1")
        assert (await until_status(client, "late-1", TERMINAL))["status"] == "success"


async def test_tombstones_are_bounded_in_count_and_the_oldest_go_first(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine(max_tombstones=2)
    async with client_for(open_app(engine)) as client:
        for rollout_id in ("grave-1", "grave-2", "grave-3"):
            assert await cancelled(client, {"ids": [rollout_id]}) == {rollout_id: "not_found"}
        assert (await status_of(client, "grave-1"))["status"] == "unknown"  # forgotten
        for rollout_id in ("grave-2", "grave-3"):
            assert (await status_of(client, rollout_id))["status"] == "cancelled"
            assert (await submit(client, rollout_id)).status_code == 409
        await accepted(client, "grave-1")
        assert (await until_status(client, "grave-1", TERMINAL))["status"] == "success"


async def test_abort_tombstones_its_scope_so_late_surplus_never_starts(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    clock = StepClock()
    engine = make_engine(retention_sec=RETENTION_SEC, abort_tombstone_sec=60, clock=clock)
    async with client_for(open_app(engine)) as client:
        await accepted(client, "step-1::live", agent=LONG)
        await until_sandbox_up(docker_client, engine, "step-1::live")

        # The trainer's abort, from its own thread: the in-flight one is stopped ...
        assert await asyncio.to_thread(abort, "step-1::") == {"step-1::live": "cancelled_running"}
        # ... and surplus of the scope arriving afterwards never starts: by id prefix or session.
        for rollout_id, fields in (("step-1::late", {}), ("other-7", {"session_id": "step-1::"})):
            late = await submit(client, rollout_id, **fields)
            assert late.status_code == 409, late.text
            assert late.json()["status"] == "cancelled"
            assert "scope 'step-1::' was aborted" in late.json()["detail"]
            doc = await status_of(client, rollout_id)
            assert doc["status"] == "cancelled" and "aborted" in doc["error"]
        assert [p.name for p in trial_dirs(config, engine)] == [trial_id_for("step-1::live")]
        # Another scope is not touched.
        await accepted(client, "step-2::a")
        assert (await until_status(client, "step-2::a", TERMINAL))["status"] == "success"
        assert (await until_status(client, "step-1::live", TERMINAL))["status"] == "cancelled"

        # After the window the scope takes rollouts again; the refused ids stay cancelled.
        clock.offset = 61
        await accepted(client, "step-1::next")
        assert (await until_status(client, "step-1::next", TERMINAL))["status"] == "success"
        refused_again = await submit(client, "step-1::late")
        assert refused_again.status_code == 409
        assert (await status_of(client, "step-1::late"))["status"] == "cancelled"
    assert our_container_names(docker_client, config) == []


# -- 5. long poll ----------------------------------------------------------------------------


async def test_a_long_poll_answers_when_the_status_changes_not_at_its_deadline(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=1)
    async with client_for(open_app(engine)) as client:
        # unknown -> queued: a poll on an id nobody submitted yet answers when it comes.
        polling = asyncio.ensure_future(status_of(client, "lp-0", wait=25))
        await until_long_polls(engine, 1)
        await held_blocker(client, docker_client, engine, "lp-0")
        assert (await polling)["status"] in {"queued", "running"}

        await accepted(client, "lp-1")
        assert (await status_of(client, "lp-1"))["status"] == "queued"
        started = time.monotonic()
        alias_poll = asyncio.ensure_future(
            client.get("/rollout/lp-1/status", params={"wait": 25})  # the alias polls too
        )
        await until_long_polls(engine, 1)
        assert not alias_poll.done()  # nothing changed yet: it waits
        assert await cancelled(client, {"ids": ["lp-0"]}) == {"lp-0": "cancelled_running"}
        moved = (await alias_poll).json()
        assert moved["status"] != "queued"  # the slot freed: it started
        assert time.monotonic() - started < 20  # well before its deadline

        done = await until_status(client, "lp-1", TERMINAL)
        assert done["status"] == "success"
        started = time.monotonic()
        assert await status_of(client, "lp-1", wait=25) == done  # settled: answered at once
        assert time.monotonic() - started < 5
        assert (await until_status(client, "lp-0", TERMINAL))["status"] == "cancelled"
    assert our_container_names(docker_client, config) == []


async def test_a_long_poll_without_a_change_answers_at_its_deadline(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        started = time.monotonic()
        doc = await status_of(client, "lp-quiet", wait=0.5)
        elapsed = time.monotonic() - started
        assert doc["status"] == "unknown"
        assert 0.5 <= elapsed < 5
        assert engine.long_polls == 0


async def test_wait_is_at_most_25_seconds_and_long_polls_are_bounded(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine(max_long_polls=1)
    async with client_for(open_app(engine)) as client:
        for wait in ("25.5", "26", "-1", "soon"):
            assert (await client.get("/rollouts/x", params={"wait": wait})).status_code == 422
            assert (await client.get("/rollout/x/status", params={"wait": wait})).status_code == 422
        polling = asyncio.ensure_future(status_of(client, "lp-bound", wait=25))
        await until_long_polls(engine, 1)
        busy = await client.get("/rollouts/lp-other", params={"wait": 25})
        assert busy.status_code == 429, busy.text
        assert busy.headers["Retry-After"] == "1"
        assert (await status_of(client, "lp-other"))["status"] == "unknown"  # plain GET is fine
        # A tombstone is a change too: the held poll answers `cancelled` at once.
        assert await cancelled(client, {"ids": ["lp-bound"]}) == {"lp-bound": "not_found"}
        assert (await polling)["status"] == "cancelled"
        assert engine.long_polls == 0


# -- 6. the seed's spelling ------------------------------------------------------------------


async def test_the_seed_spelling_routes_answer_as_the_plural_ones(make_engine: MakeEngine) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        first = await submit(client, "alias-1", "/rollout")
        assert (first.status_code, first.json()) == (202, {"rollout_id": "alias-1",
                                                           "status": "queued"})  # fmt: skip
        done = await until_status(client, "alias-1", TERMINAL)
        alias = await client.get("/rollout/alias-1/status")
        assert (alias.status_code, alias.json()) == (200, done)
        assert await cancelled(client, {"ids": ["alias-1"]}, route="/rollout/cancel") == {
            "alias-1": "not_found"
        }
        for bad in ({}, {"rollout_id": "a/b"}, {"rollout_id": "x", "colour": "blue"}):
            assert (await client.post("/rollout", json=bad)).status_code == 422
        assert (await client.post("/rollout/cancel", json={})).status_code == 422
        assert (await client.get("/rollout/-x/status")).status_code == 422
