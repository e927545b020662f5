"""Placing one trial: Ray finds a node with room for its cpus and memory, the node's actor
runs it, and its events come back as they happen; a running work's questions (a session's
calls) go to the actor of the node it runs on (`ask`).

Each trial holds a placement group of one bundle (its sandbox's cpus and memory) while it
runs, so Ray's own scheduler decides where it goes and how many run on each node: a node
holds as many trials as its cores and memory allow, a trial waits while no node has room,
and nodes that join are used as soon as Ray sees them. Nodes whose engines stopped
answering are left out with a label selector on Ray's `ray.io/node-id` label.

`RayPlacement` is Ray's `Placement`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any

import ray
from ray.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)

from orchestrator.common.errors import (
    SandboxError,
    SessionClosedError,
    TaskError,
    TrialboxError,
)
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import ride_out_cancels
from orchestrator.executors.placement import Emit, PlacedWork, Placement, Resources
from orchestrator.executors.ray.fleet import Fleet, Host, lost
from orchestrator.executors.ray.host import ImageReady
from orchestrator.executors.ray.parcels import Packer, TaskParcel
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.tasks.task import Task

NODE_ID_LABEL = "ray.io/node-id"
_MIB = 1024 * 1024


class FirstBuild:
    """With a registry, the first trial of a task content builds (and pushes) its image;
    the others of that content wait for it, then pull instead of building again."""

    KEEP = 1024

    def __init__(self) -> None:
        self._built: OrderedDict[str, asyncio.Event] = OrderedDict()

    async def turn(self, digest: str) -> bool:
        """True for the first caller of a digest, who must call `done`; the others wait."""
        event = self._built.get(digest)
        if event is None:
            self._built[digest] = asyncio.Event()
            while len(self._built) > self.KEEP:
                self._built.popitem(last=False)
            return True
        await event.wait()
        return False

    def done(self, digest: str) -> None:
        event = self._built.get(digest)
        if event is not None:
            event.set()


def _fits(node: dict[str, Any], resources: Resources) -> bool:
    total = node.get("Resources") or {}
    return (
        total.get("CPU", 0) >= resources.cpus
        and total.get("memory", 0) >= resources.memory_mb * _MIB
    )


class RayPlacement(Placement):
    """Runs works on the nodes of the fleet's cluster."""

    def __init__(self, config: RayBackendConfig, fleet: Fleet, packer: Packer) -> None:
        self.config, self.fleet, self.packer = config, fleet, packer
        self.first_build = FirstBuild()
        self._running: dict[str, Host] = {}  # the node each running work is on, by key

    async def run(self, work: PlacedWork, task: Task, emit: Emit) -> None:
        parcel = await self.packer.parcel(task)
        group = await self._reserve(work.resources, task)
        try:
            await group.ready()
            node_id = await run_blocking(
                lambda: placement_group_table(group)["bundles_to_node_id"][0]
            )
            host = await self.fleet.host(node_id)
            emit(host.info)
            first = self.config.registry is None or await self.first_build.turn(parcel.digest)
            self._running[work.key] = host
            try:
                await self._stream(host, work, parcel, emit)
            finally:
                self._running.pop(work.key, None)
                if first and self.config.registry is not None:
                    self.first_build.done(parcel.digest)
        finally:
            with contextlib.suppress(Exception):
                remove_placement_group(group)

    async def aclose(self) -> None:
        await self.fleet.close_pools()

    async def ask(self, key: str, request: Any) -> Any:
        """`request` to the running work `key` on its node's actor (`NodeHost.ask`); what it
        raised there is raised here as it was (a session's refusals, `FileNotFoundError`,
        a `SandboxError`); a dead node or actor is `SandboxLostError`. Cancelling the ask
        cancels the call on the node."""
        host = self._running.get(key)
        if host is None:
            raise SessionClosedError(f"{key} runs on no node now: it has ended")
        ref = host.actor.ask.remote(key, request)
        try:
            return await ref
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
            raise
        except ray.exceptions.RayTaskError as exc:  # the node raised: its own exception
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise SandboxError(f"the node {host.info.address} failed a call: {exc}") from exc
        except ray.exceptions.RayError as exc:
            self.fleet.forget(host.node_id, f"{type(exc).__name__}: {exc}")
            raise lost(host.info, host.node_id, exc) from exc

    async def _reserve(self, resources: Resources, task: Task) -> Any:
        """A placement group of one bundle, on a node that may run trials now."""
        nodes = await self.fleet.nodes()
        if not any(_fits(node, resources) for node in nodes):
            largest = max(
                ((n["Resources"].get("CPU", 0), n["Resources"].get("memory", 0)) for n in nodes),
                default=(0, 0),
            )
            raise TaskError(
                f"{task.path / 'task.toml'}: environment.cpus = {resources.cpus:g} and "
                f"memory_mb = {resources.memory_mb}, but no node of the Ray cluster has that "
                f"much (the largest: {largest[0]:g} cpus, {largest[1] / _MIB:.0f} MiB of Ray "
                "memory); lower them, or add a larger node"
            )
        selector = dict(self.config.node_labels)
        excluded = await self.fleet.excluded()
        alive = {node["NodeID"] for node in nodes}
        if excluded & alive and alive - excluded:  # never leave a trial nowhere to go
            selector[NODE_ID_LABEL] = f"!in({','.join(sorted(excluded & alive))})"
        bundle = {"CPU": resources.cpus, "memory": resources.memory_mb * _MIB}
        return placement_group([bundle], bundle_label_selector=[selector] if selector else None)

    async def _stream(self, host: Host, work: PlacedWork, parcel: TaskParcel, emit: Emit) -> None:
        """The work's events, as they come; a cancel passed on to the node, whose last
        events are still awaited (within `cancel_grace_sec`)."""

        def deliver(event: object) -> None:
            if isinstance(event, ImageReady):
                self.first_build.done(event.digest)
            else:
                emit(event)

        consuming = asyncio.ensure_future(
            self._consume(host, host.actor.run.remote(work, parcel), deliver)
        )
        try:
            await asyncio.shield(consuming)
        except asyncio.CancelledError:
            if not consuming.done():
                host.actor.cancel.remote(work.key)
                await ride_out_cancels(consuming, self.config.cancel_grace_sec)
                consuming.cancel()
            raise

    async def _consume(self, host: Host, stream: Any, deliver: Emit) -> None:
        try:
            async for ref in stream:
                deliver(await ref)
        except ray.exceptions.RayTaskError as exc:  # the node's host raised: not a lost node
            cause = getattr(exc, "cause", None)
            if isinstance(cause, TrialboxError):
                raise cause from None
            raise SandboxError(f"the node {host.info.address} failed the trial: {exc}") from exc
        except ray.exceptions.RayError as exc:
            self.fleet.forget(host.node_id, f"{type(exc).__name__}: {exc}")
            raise lost(host.info, host.node_id, exc) from exc
