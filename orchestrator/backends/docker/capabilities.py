"""What containers of the engine can have: network modes, host mounts, the host's cpus and memory.

The cpus and memory come from the engine's `info`, an engine call: read off the loop, once per
backend (they do not change while it runs), by one caller while the others wait. A read that
fails (no engine yet, an engine error) is not remembered: that trial gets "unknown" (nothing is
refused for it, and its sandbox's create says what is wrong) and the next one asks again.

`EngineCapabilities` holds that one read per `DockerBackend`, under a lock.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.inspection import engine_is_local
from orchestrator.sandbox import Capabilities

log = logging.getLogger(__name__)

NETWORK_MODES = frozenset({"none", "bridge", "host"})


def docker_capabilities(cpus: float | None = None, memory_mb: int | None = None) -> Capabilities:
    """A bind mount (the gateway's socket) names a path on the engine's host, so it is
    offered only when the engine is local."""
    return Capabilities(
        network_modes=NETWORK_MODES, gpus=False, host_mounts=engine_is_local(),
        cpus=cpus, memory_mb=memory_mb,
    )  # fmt: skip


async def read_engine_capacity() -> tuple[float | None, int | None]:
    """The engine host's cpus and memory (MiB); raises when the engine does not answer."""
    info = await docker_api.in_thread(lambda: docker_api.docker_client().info())
    cpus, memory = info.get("NCPU"), info.get("MemTotal")
    return (float(cpus) if cpus else None), (int(memory) // (1024 * 1024) if memory else None)


class EngineCapabilities:
    """One backend's capabilities: the first successful read of the engine, kept."""

    def __init__(self) -> None:
        self._known: Capabilities | None = None
        self._failures = 0  # failed reads: a caller that waited for one does not ask again
        # One lock per event loop: an asyncio.Lock a caller waited on belongs to that loop,
        # and one backend may serve several loops in turn (each `*_sync` call runs its own).
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self) -> Capabilities:
        if self._known is not None:
            return self._known
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        failures = self._failures
        async with lock:
            if self._known is not None:  # read by the caller this one waited for
                return self._known
            if self._failures != failures:  # the read this one waited for failed just now
                return docker_capabilities()
            try:
                cpus, memory_mb = await read_engine_capacity()
            except Exception as exc:  # asked again by the next caller
                self._failures += 1
                log.debug("the engine's cpus and memory could not be read: %s", exc)
                return docker_capabilities()
            self._known = docker_capabilities(cpus, memory_mb)
            return self._known
