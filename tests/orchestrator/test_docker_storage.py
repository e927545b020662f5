"""How a Docker sandbox is held to its storage_mb, decided without an engine: whether the
size option is asked for (by the engine's storage driver, and a refusal remembered per
engine), how what it wrote is counted on the host, how often it is looked at. The watcher
on a real engine: tests/faults/test_storage_limit.py."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from orchestrator.backends.docker import storage
from orchestrator.backends.docker.storage import (
    COST_FACTOR,
    MIB,
    POLL_MIN_SEC,
    POLL_SEC,
    DiskWatch,
    create_sized,
    next_interval,
    size_option,
    walk_bytes,
)
from orchestrator.common.errors import SandboxError
from orchestrator.sandbox import Health

PQUOTA = (
    "create a container from img: engine error 500: --storage-opt is supported only for "
    "overlay over xfs with 'pquota' mount option"
)


class FakeEngine:
    """Records each create's extra options; refuses the size option when `refuses`."""

    def __init__(self, refuses: str | None = None) -> None:
        self.refuses = refuses
        self.creates: list[dict[str, object]] = []

    async def create(self, extra: Mapping[str, object]) -> str:
        self.creates.append(dict(extra))
        if self.refuses is not None and "storage_opt" in extra:
            raise SandboxError(self.refuses)
        return "container"


@pytest.fixture(autouse=True)
def _no_remembered_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "_refused", set())


@pytest.mark.parametrize("driver", ["fuse-overlayfs", "vfs", "aufs", ""])
def test_no_size_option_on_a_driver_without_one(driver: str) -> None:
    assert size_option(50, ("engine", driver)) == {}


@pytest.mark.parametrize("driver", sorted(storage.SIZE_DRIVERS))
def test_the_size_option_on_a_driver_with_one(driver: str) -> None:
    assert size_option(50, ("engine", driver)) == {"size": "50M"}
    assert size_option(None, ("engine", driver)) == {}


async def test_a_driver_that_takes_the_size_option_enforces_it() -> None:
    engine = FakeEngine()
    made, enforced = await create_sized(50, engine.create, engine=("e1", "devicemapper"))
    assert (made, enforced) == ("container", True)
    assert engine.creates == [{"storage_opt": {"size": "50M"}}]


async def test_overlay2_without_pquota_falls_back_once_per_engine() -> None:
    engine = FakeEngine(refuses=PQUOTA)
    made, enforced = await create_sized(50, engine.create, engine=("e1", "overlay2"))
    assert (made, enforced) == ("container", False)
    assert engine.creates == [{"storage_opt": {"size": "50M"}}, {}]
    # The engine's answer is remembered: the next sandbox is made without asking again...
    engine.creates.clear()
    assert (await create_sized(50, engine.create, engine=("e1", "overlay2")))[1] is False
    assert engine.creates == [{}]
    # ...but only for that engine.
    engine.creates.clear()
    await create_sized(50, engine.create, engine=("e2", "overlay2"))
    assert engine.creates == [{"storage_opt": {"size": "50M"}}, {}]


async def test_another_refusal_is_raised_and_not_taken_for_the_driver_s() -> None:
    engine = FakeEngine(refuses="create a container from img: engine error 500: no space left")
    with pytest.raises(SandboxError, match="no space left"):
        await create_sized(50, engine.create, engine=("e1", "overlay2"))
    assert storage._refused == set()


async def test_a_driver_without_the_option_is_never_asked() -> None:
    engine = FakeEngine(refuses=PQUOTA)
    assert (await create_sized(50, engine.create, engine=("e1", "fuse-overlayfs")))[1] is False
    assert engine.creates == [{}]


def test_what_is_written_counts_as_blocks_and_each_hard_link_once(tmp_path: Path) -> None:
    layer, volume = tmp_path / "layer", tmp_path / "volume"
    (layer / "deep" / "er").mkdir(parents=True)
    volume.mkdir()
    (layer / "deep" / "er" / "data").write_bytes(os.urandom(3 * MIB))
    os.link(layer / "deep" / "er" / "data", layer / "linked")
    (layer / "loop").symlink_to(layer)  # not followed
    with (volume / "sparse").open("wb") as handle:
        handle.truncate(1024 * MIB)  # a GiB long, nothing allocated
    (volume / "vol").write_bytes(os.urandom(MIB))

    used, complete = walk_bytes([layer, volume])

    assert complete
    assert 4 * MIB <= used < 5 * MIB, used


def test_a_walk_past_its_budget_says_it_saw_only_part(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 10)
    assert walk_bytes([tmp_path], budget_sec=-1.0) == (0, False)


def test_looks_come_about_every_second_and_never_cost_more_than_a_quarter() -> None:
    assert next_interval(0.01, 0, 50 * MIB, 0.0) == POLL_SEC
    assert next_interval(2.0, 0, 50 * MIB, 0.0) == COST_FACTOR * 2.0


def test_a_fast_writer_near_the_limit_is_looked_at_sooner() -> None:
    near = next_interval(0.01, 40 * MIB, 50 * MIB, rate=20 * MIB)  # half a second left
    assert POLL_MIN_SEC <= near < POLL_SEC
    assert next_interval(0.01, 49 * MIB, 50 * MIB, rate=1000 * MIB) == POLL_MIN_SEC


def test_where_the_driver_enforces_the_size_within_one_percent_is_full() -> None:
    assert DiskWatch("c", 100, enforced=False).threshold == 100 * MIB
    assert DiskWatch("c", 100, enforced=True).threshold == 99 * MIB


class HostWatch(DiskWatch):
    """A watch of a folder of this host, whose kill is only recorded."""

    def __init__(self, folder: Path, limit_mb: int) -> None:
        super().__init__("c0ffee", limit_mb, enforced=False)
        self.folder = folder
        self.kills = 0

    async def _folders(self) -> list[Path] | None:
        return [self.folder]

    async def _kill(self) -> None:
        self.kills += 1


async def test_a_watch_kills_once_at_the_limit_and_says_what_it_measured(tmp_path: Path) -> None:
    watch = HostWatch(tmp_path, limit_mb=1)
    (tmp_path / "big").write_bytes(os.urandom(2 * MIB))

    watch.start()
    assert watch._task is not None  # started
    await asyncio.wait_for(watch._task, 10)

    assert (watch.exceeded, watch.kills) == (True, 1)
    marked = watch.mark(Health(running=False, stopped_outside=True))
    assert (marked.storage_used_mb, marked.storage_limit_mb, marked.storage_exceeded) == (
        2,
        1,
        True,
    )


async def test_a_watch_under_the_limit_keeps_looking_and_ends_with_its_layer(
    tmp_path: Path,
) -> None:
    layer = tmp_path / "layer"
    layer.mkdir()
    watch = HostWatch(layer, limit_mb=10)
    watch.start()
    for _ in range(100):  # bounded: the first look is at once
        if watch.used is not None:
            break
        await asyncio.sleep(0.05)
    assert watch.used is not None and not watch.exceeded
    assert watch.mark(Health()).storage_exceeded is False

    layer.rmdir()  # the container was removed by someone else: nothing left to watch
    assert watch._task is not None  # started
    await asyncio.wait_for(watch._task, 10)
    assert (watch.exceeded, watch.kills) == (False, 0)
