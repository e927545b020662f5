"""The Docker engine's cpus and memory: read off the loop once per backend, by one caller while
the others wait, and a failed read never remembered (issue 20 item 7)."""

from __future__ import annotations

import asyncio
import os

import pytest

from orchestrator.backends.docker import capabilities
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.capabilities import EngineCapabilities


class _Engine:
    """A stand-in for the engine's `info`: fails while `down`, counts the reads."""

    def __init__(self, *, down: bool = False) -> None:
        self.down = down
        self.reads = 0
        self.release = asyncio.Event()
        self.release.set()

    async def read(self) -> tuple[float | None, int | None]:
        self.reads += 1
        await self.release.wait()
        if self.down:
            raise ConnectionError("the engine does not answer")
        return 8.0, 16384


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> _Engine:
    stand_in = _Engine()
    monkeypatch.setattr(capabilities, "read_engine_capacity", stand_in.read)
    return stand_in


async def test_concurrent_callers_share_one_read_and_later_ones_none(engine: _Engine) -> None:
    engine.release.clear()
    cache = EngineCapabilities()
    callers = [asyncio.create_task(cache.get()) for _ in range(5)]
    await asyncio.sleep(0.01)
    engine.release.set()
    got = await asyncio.gather(*callers)
    assert {(c.cpus, c.memory_mb) for c in got} == {(8.0, 16384)}
    assert (await cache.get()).cpus == 8.0
    assert engine.reads == 1


async def test_a_failed_read_is_not_remembered(engine: _Engine) -> None:
    engine.down = True
    cache = EngineCapabilities()
    unknown = await cache.get()
    assert (unknown.cpus, unknown.memory_mb) == (None, None)  # nothing refused for it
    assert unknown.network_modes == capabilities.NETWORK_MODES
    engine.down = False
    known = await cache.get()
    assert (known.cpus, known.memory_mb) == (8.0, 16384)
    assert engine.reads == 2


async def test_callers_waiting_on_a_failed_read_do_not_each_ask_again(engine: _Engine) -> None:
    engine.down = True
    engine.release.clear()
    cache = EngineCapabilities()
    callers = [asyncio.create_task(cache.get()) for _ in range(4)]
    await asyncio.sleep(0.01)
    engine.release.set()
    assert {c.cpus for c in await asyncio.gather(*callers)} == {None}
    assert engine.reads == 1
    await cache.get()  # a later caller asks again
    assert engine.reads == 2


async def test_each_backend_reads_its_own(engine: _Engine) -> None:
    first, second = DockerBackend(), DockerBackend()
    await first.capabilities()
    await first.capabilities()
    await second.capabilities()
    assert engine.reads == 2


@pytest.mark.docker
async def test_the_real_engine_reports_this_hosts_cpus_and_memory() -> None:
    known = await DockerBackend().capabilities()
    assert known.cpus == float(os.cpu_count() or 0)
    assert known.memory_mb is not None and known.memory_mb > 100
