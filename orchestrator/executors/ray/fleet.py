"""The driver's view of the cluster: which nodes may run trials, each node's actor, and
which nodes' engines stopped answering.

Ray knows which nodes are alive and schedules onto them; what it cannot know is whether a
node's Docker engine still answers. Each node's actor is asked now and then (never more
often than `health_interval_sec`, and only while trials are being placed); a node whose
engine does not answer, or whose actor died, is left out of new placements until it
answers again, so the engine keeps serving on the others.

`Fleet` holds the actors and the nodes left out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.common.errors import SandboxLostError
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.executors.ray.host import HEALTH_TIMEOUT_SEC, NodeHost
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.trials.result import NodeInfo

log = logging.getLogger(__name__)

MAX_TRIALS_PER_NODE = 10_000  # the actor's concurrency: Ray's resources bound what runs
NODES_TTL_SEC = 1.0  # the cluster's node table is read at most this often

_remote_host: Any = None


def _host_class() -> Any:
    global _remote_host
    if _remote_host is None:
        _remote_host = ray.remote(NodeHost)
    return _remote_host


def connect(config: RayBackendConfig) -> None:
    """Join the cluster once per process: the one this process is connected to already (a
    trainer's), else `config.address`, else 'auto'."""
    if ray.is_initialized():
        return
    ray.init(
        address=config.address or "auto",
        namespace=config.namespace,
        ignore_reinit_error=True,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )


@dataclass
class Host:
    """One node's actor, and what the node said about itself."""

    node_id: str
    actor: Any
    info: NodeInfo


def lost(info: NodeInfo | None, node_id: str, exc: BaseException) -> SandboxLostError:
    """A node that died or stopped answering, in the words of the result."""
    where = f"{info.address} ({node_id[:12]})" if info else node_id[:12]
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return SandboxLostError(
        f"the Ray node {where} running this trial was lost ({type(exc).__name__}: {why}); "
        "the sample is discarded, and with retries it runs again on another node"
    )


class Fleet:
    """The node actors of one backend, made on first use, and the nodes left out."""

    def __init__(self, config: RayBackendConfig, limits: Limits, *, warm_pool: int = 0) -> None:
        self.config, self.limits = config, limits
        self.warm_pool = warm_pool  # each node's actor keeps its own pools (host.py)
        self._hosts: dict[str, Host] = {}
        self._making: dict[str, asyncio.Future[Host]] = {}
        self._unwell: dict[str, str] = {}  # node id -> why it is left out
        self._checked: dict[str, float] = {}
        self._checks: set[asyncio.Future[None]] = set()
        self._nodes: tuple[float, list[dict[str, Any]]] = (0.0, [])
        digest = hashlib.sha256(f"{config!r}{limits!r}{warm_pool}".encode()).hexdigest()[:8]
        self._suffix = digest

    async def ready(self) -> None:
        await run_blocking(connect, self.config)

    def _read_nodes(self) -> list[dict[str, Any]]:
        wanted = self.config.node_labels.items()
        return [
            n
            for n in ray.nodes()
            if n.get("Alive") and all((n.get("Labels") or {}).get(k) == v for k, v in wanted)
        ]

    async def nodes(self) -> list[dict[str, Any]]:
        """The alive nodes that may run trials (Ray's table, read at most once a second)."""
        read_at, nodes = self._nodes
        if time.monotonic() - read_at > NODES_TTL_SEC:
            await self.ready()
            nodes = await run_blocking(self._read_nodes)
            self._nodes = (time.monotonic(), nodes)
        return nodes

    async def host(self, node_id: str) -> Host:
        """The node's actor, made (and asked who it is) on first use."""
        host = self._hosts.get(node_id)
        if host is not None:
            return host
        making = self._making.get(node_id)
        if making is None:
            making = asyncio.ensure_future(self._make(node_id))
            self._making[node_id] = making
            making.add_done_callback(lambda _: self._making.pop(node_id, None))
        return await asyncio.shield(making)

    async def _make(self, node_id: str) -> Host:
        job = ray.get_runtime_context().get_job_id()
        actor = (
            _host_class()
            .options(
                name=f"trialbox-{job}-{node_id[:16]}-{self._suffix}",
                namespace=self.config.namespace,
                get_if_exists=True,
                num_cpus=0,
                max_concurrency=MAX_TRIALS_PER_NODE,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(self.config, self.limits, self.warm_pool)
        )
        try:
            info = await actor.info.remote()
        except Exception as exc:
            self.forget(node_id, f"{type(exc).__name__}: {exc}")
            raise lost(None, node_id, exc) from exc
        host = self._hosts[node_id] = Host(node_id, actor, info)
        self._checked[node_id] = time.monotonic()
        return host

    def forget(self, node_id: str, why: str) -> None:
        """The node's actor is gone (or its engine failed): leave the node out for now."""
        self._hosts.pop(node_id, None)
        self._unwell[node_id] = why
        self._checked[node_id] = time.monotonic()

    def known(self) -> list[Host]:
        return list(self._hosts.values())

    async def close_pools(self) -> None:
        """Every known node removes its idle pooled sandboxes; a node that does not answer
        in time keeps them, for `trialbox reap --ray` (its actor's process made them)."""
        if not self.warm_pool:
            return
        closing = [host.actor.close_pools.remote() for host in self.known()]
        results = await asyncio.gather(
            *(asyncio.wait_for(c, HEALTH_TIMEOUT_SEC + 5) for c in closing),
            return_exceptions=True,
        )
        for host, result in zip(self.known(), results, strict=False):
            if isinstance(result, BaseException):
                log.warning("node %s kept its warm pool: %s", host.node_id[:12], result)

    async def excluded(self) -> set[str]:
        """Nodes new trials must not be placed on now; stale answers are asked again (in
        the background: placing never waits for a health check)."""
        now = time.monotonic()
        for node_id, host in list(self._hosts.items()):
            if now - self._checked.get(node_id, 0.0) >= self.config.health_interval_sec:
                self._checked[node_id] = now
                check = asyncio.ensure_future(self._check(host))
                self._checks.add(check)
                check.add_done_callback(self._checks.discard)
        for node_id in list(self._unwell):
            if node_id not in self._hosts and now - self._checked[node_id] > 30:
                self._unwell.pop(node_id)  # try a lost node's actor again, now and then
        return set(self._unwell)

    async def _check(self, host: Host) -> None:
        try:
            why = await asyncio.wait_for(host.actor.health.remote(), HEALTH_TIMEOUT_SEC + 5)
        except Exception as exc:  # the actor is gone, or hangs
            why = f"its actor does not answer ({type(exc).__name__})"
            self._hosts.pop(host.node_id, None)
        if why is None:
            if self._unwell.pop(host.node_id, None) is not None:
                log.warning("node %s answers again; trials are placed there", host.info.address)
            return
        if host.node_id not in self._unwell:
            log.warning("node %s is left out of new trials: %s", host.info.address, why)
        self._unwell[host.node_id] = why
