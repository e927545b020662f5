"""The long-lived actor on each node: it owns the node's engine through the node's backend
(Docker, with its single-flight builds and the registry) and runs whole trials there.

One actor per node and driver; it lives as long as the driver does and serves every trial
the driver places on its node, concurrently (an async actor). A trial's events are streamed
back as they happen; a cancel names the trial's key and reaches it as an asyncio cancel,
which the trial turns into the relay's host abort, teardown and a cancelled result.

A session is one such work (`node_session.SessionWork`) that lives until the session ends;
its calls arrive by its key (`ask`); a cancel of its work is the session's host abort. The
driver's engine ends its sessions at its shutdown; a driver that dies takes its actors with
it (Ray kills them), and a session's sandbox then stays on the engine, as a running trial's
does, for `trialbox reap`; an idle session ends on its node after its `idle_ttl_sec`.

`NodeHost` is the actor's class (made remote by `fleet.py`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import ray

from orchestrator.backends import build_backend
from orchestrator.common.limits import Limits
from orchestrator.executors.node_session import SessionCall, answer
from orchestrator.executors.node_trial import scratch_root
from orchestrator.executors.placement import PlacedWork
from orchestrator.executors.ray.parcels import TaskParcel, Unpacker
from orchestrator.sandbox import (
    Backend,
    ImageOutcome,
    ImagePlan,
    Leftover,
)
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.sandbox.pool import PooledBackend
from orchestrator.sandbox.wrapper import BackendWrapper
from orchestrator.tasks.task import Task
from orchestrator.trials.result import NodeInfo

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
HEALTH_TIMEOUT_SEC = 10.0


@dataclass(frozen=True)
class ImageReady:
    """Said by a node once a trial's image exists there (and in the registry, if any)."""

    digest: str


class _Announcing(BackendWrapper):
    """The node's backend as a trial sees it: after its image is there, the driver hears
    so (other trials of the same task may then pull it from the registry)."""

    def __init__(self, inner: Backend, announce: Callable[[], None]) -> None:
        super().__init__(inner)
        self._announce = announce

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        try:
            return await self.inner.ensure_image(
                task, base_image_map, plan=plan, force_build=force_build
            )
        finally:
            self._announce()


def _node_backend(config: RayBackendConfig, limits: Limits) -> Backend:
    if config.node.type == "fake":
        return build_backend(config.node, limits)
    from orchestrator.backends.docker.backend import DockerBackend
    from orchestrator.backends.docker.images import ImageBuilder
    from orchestrator.backends.docker.registry import Registry

    if config.registry is None:
        return DockerBackend(limits)
    return DockerBackend(limits, builder=ImageBuilder(registry=Registry(config.registry)))


class NodeHost:
    """What the driver asks of one node. Made with `ray.remote` (see `fleet`)."""

    def __init__(self, config: RayBackendConfig, limits: Limits, warm_pool: int = 0) -> None:
        self.config = config
        backend = _node_backend(config, limits)
        # The node's warm pools (sandbox/pool.py): its trials and sessions take from them.
        self.pool = PooledBackend(backend, size=warm_pool) if warm_pool else None
        self.backend: Backend = self.pool or backend
        self.parcels = Unpacker(scratch_root() / f"tasks-{os.getpid()}")
        self._runs: dict[str, asyncio.Future[None]] = {}
        self._cancelled: set[str] = set()  # cancels that came before their run

    async def info(self) -> NodeInfo:
        node_id = ray.get_runtime_context().get_node_id()
        if self.config.node.type == "fake":
            engine, engine_id = "fake", f"fake-{node_id[:12]}"
        else:
            from orchestrator.backends.docker import api as docker_api

            client = docker_api.docker_client()
            found = await docker_api.call("ask the engine who it is", client.info)
            engine = os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
            engine_id = str(found.get("ID") or found.get("Name") or "?")
        address = ray.util.get_node_ip_address()
        return NodeInfo(node_id=node_id, address=address, engine=engine, engine_id=engine_id)

    async def close_pools(self) -> None:
        """Remove the node's idle pooled sandboxes (the driver's shutdown)."""
        if self.pool is not None:
            await self.pool.aclose()

    async def health(self) -> str | None:
        """None when the node's engine answers; else what is wrong with it."""
        if self.config.node.type == "fake":
            return None
        from orchestrator.backends.docker import api as docker_api

        try:
            client = docker_api.docker_client()
            await asyncio.wait_for(
                docker_api.call_once("ping the engine", client.ping), HEALTH_TIMEOUT_SEC
            )
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    async def run(self, work: PlacedWork, parcel: TaskParcel) -> AsyncIterator[Any]:
        """Run one work here, streaming its events (and `ImageReady`) as they come."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        task = await self.parcels.task(parcel)
        backend = _Announcing(self.backend, lambda: queue.put_nowait(ImageReady(parcel.digest)))
        running = asyncio.ensure_future(work(backend, task, queue.put_nowait))
        self._runs[work.key] = running
        if work.key in self._cancelled:
            self._cancelled.discard(work.key)
            running.cancel()
        try:
            while not running.done() or not queue.empty():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, running}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            error = None if running.cancelled() else running.exception()
            if error is not None:
                raise error
        finally:
            self._runs.pop(work.key, None)

    async def ask(self, key: str, call: SessionCall) -> Any:
        """One call of the session that work `key` holds open here (`node_session.answer`):
        its answer, or the exception it raised, which Ray carries back to the driver."""
        return await answer(key, call)

    def cancel(self, key: str) -> bool:
        """Cancel the work named `key`; one not started yet is cancelled as it starts."""
        running = self._runs.get(key)
        if running is None:
            self._cancelled.add(key)
            return False
        return running.cancel()

    async def plan_image(self, parcel: TaskParcel, mapping: dict[str, str], force: bool) -> str:
        task = await self.parcels.task(parcel)
        return (await self.backend.plan_image(task, mapping, force_build=force)).tag

    async def ensure_image(
        self, parcel: TaskParcel, mapping: dict[str, str], force: bool
    ) -> ImageOutcome:
        task = await self.parcels.task(parcel)
        return await self.backend.ensure_image(task, mapping, force_build=force)

    async def find_leftovers(self, owner: str | None, job: str | None) -> list[Leftover]:
        node_id = ray.get_runtime_context().get_node_id()
        found = await self.backend.find_leftovers(owner=owner, job=job)
        return [leftover.model_copy(update={"node": node_id}) for leftover in found]

    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        return await self.backend.remove_leftovers(leftovers)
