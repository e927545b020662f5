"""A sandbox's disk held to its task's `storage_mb`, so an agent never fills the host's disk.

Two means, both used where they work. The engine's own size option (`--storage-opt size=`) is
asked for when the storage driver is one that has it (overlay2 needs xfs mounted with pquota,
and refuses otherwise: tried once per engine, the answer remembered); writes past it fail
inside the sandbox. And a watcher measures what the sandbox wrote (its writable layer and its
volumes) every second or so for as long as it lives; at the limit the engine kills the
sandbox, so nothing more is written, and its `Health` says so: the agent exhausted its disk,
as `agent` (trials/faults.py). Where the driver enforces the size, "at the limit" is within
one percent of it, since the driver stops the writes just short of it.

Measuring: on a local engine the layer's folder (`GraphDriver.Data.UpperDir`) and the volumes'
are walked on this host, counting allocated blocks (what fills a disk; sparse files and hard
links count once) in a bounded time; the engine's own `SizeRw` (`inspect --size`) is the
fallback for a remote engine or a driver without such a folder. It is far slower: on
fuse-overlayfs with 50,000 files the walk took 0.23 s, `SizeRw` 4 to 9 s. The interval adapts:
never less than four times what a measurement took, and shorter as a fast writer nears the
limit, so what it writes between two looks stays small.

`create_sized` creates a container with the size option where it is taken; `DiskWatch` is the
watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.inspection import engine_is_local
from orchestrator.common.errors import SandboxError, SandboxNotFoundError
from orchestrator.sandbox import Health

log = logging.getLogger(__name__)
T = TypeVar("T")
MIB = 1024 * 1024

# Storage drivers with a per-container size option (Docker's `--storage-opt size`).
SIZE_DRIVERS = frozenset({"overlay2", "devicemapper", "btrfs", "zfs", "windowsfilter"})
POLL_SEC = 1.0  # the usual look
POLL_MIN_SEC = 0.2  # the quickest, when a fast writer nears the limit
POLL_MAX_SEC = 2.0  # the slowest, unless a measurement itself takes longer
COST_FACTOR = 4.0  # never look more often than every 4x what a look took (<= 25 % of a core)
WALK_BUDGET_SEC = 5.0  # a walk that has not finished by then counts what it saw
ENFORCED_MARGIN = 0.01  # the driver stops writes just short of its size: within 1 % is full

WALK_THREADS = 4  # walks wait for one another, never for the engine calls' pool

_refused: set[str] = set()  # engines (by id) whose driver refused the size option
_walks = ThreadPoolExecutor(max_workers=WALK_THREADS, thread_name_prefix="trialbox-disk")


@functools.cache
def _engine_driver() -> tuple[str, str]:
    """(engine id, storage driver), asked once per process; ('', '') when it does not answer."""
    try:
        info = docker_api.docker_client().info()
    except Exception:  # no engine: the create will say so, clearly
        return "", ""
    return str(info.get("ID") or ""), str(info.get("Driver") or "")


def size_option(storage_mb: int | None, engine: tuple[str, str] | None = None) -> dict[str, str]:
    """The create's `storage_opt` for `storage_mb`, or {} when the engine's driver has none
    (or refused it before)."""
    engine_id, driver = engine or _engine_driver()
    if storage_mb is None or driver not in SIZE_DRIVERS or engine_id in _refused:
        return {}
    return {"size": f"{storage_mb}M"}


def refused_size(exc: BaseException) -> bool:
    """The engine refused the size option (overlay2 off xfs-with-pquota says so by name)."""
    text = str(exc).lower()
    return isinstance(exc, SandboxError) and ("storage-opt" in text or "storage opt" in text)


async def create_sized(
    storage_mb: int | None,
    create: Callable[[Mapping[str, Any]], Awaitable[T]],
    *,
    engine: tuple[str, str] | None = None,
) -> tuple[T, bool]:
    """`create(extra create options)`, with the size option when the engine takes it; when it
    refuses, that is remembered for the engine and the create made without. Returns what
    `create` made and whether the engine enforces the size."""
    if engine is None:  # asked of the engine once, off the loop
        engine = await docker_api.in_thread(_engine_driver)
    option = size_option(storage_mb, engine)
    if not option:
        return await create({}), False
    try:
        return await create({"storage_opt": option}), True
    except SandboxError as exc:
        if not refused_size(exc):
            raise
        log.info("the engine refused a size option (%s); the disk is watched instead", exc)
        _refused.add(engine[0])
        return await create({}), False


# -- measuring ------------------------------------------------------------------------------


def host_paths(attrs: Mapping[str, Any]) -> list[Path] | None:
    """The folders on this host that hold what the container writes: its writable layer and
    its volumes (an image's VOLUME is one). None when they cannot be read here."""
    if not engine_is_local():
        return None
    upper = ((attrs.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
    if not upper or not os.access(upper, os.R_OK | os.X_OK):
        return None
    folders = [Path(upper)]
    for mount in attrs.get("Mounts") or []:
        source = mount.get("Source")
        if mount.get("Type") == "volume" and source and os.access(source, os.R_OK | os.X_OK):
            folders.append(Path(source))
    return folders


def walk_bytes(folders: Iterable[Path], budget_sec: float = WALK_BUDGET_SEC) -> tuple[int, bool]:
    """Bytes allocated under `folders` (blocks, each hard-linked file once), and whether the
    walk finished within `budget_sec` (if not, the count is what it saw: a lower bound)."""
    deadline = time.monotonic() + budget_sec
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [os.fspath(folder) for folder in folders]
    while stack:
        if time.monotonic() > deadline:
            return total, False
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue  # removed meanwhile, or unreadable: nothing to count
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                    key = (info.st_dev, info.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total, True


def _layer_bytes(folders: list[Path]) -> int:
    """`walk_bytes` of a container's folders, off the loop; `SandboxNotFoundError` once its
    layer went with it."""
    if not folders[0].is_dir():
        raise SandboxNotFoundError(f"{folders[0]} is gone")
    return walk_bytes(folders)[0]


def size_rw_blocking(container_id: str) -> int:
    """The engine's count of the writable layer's bytes (`inspect --size`): slow, remote-safe."""
    api = docker_api.docker_client().api
    url = api._url("/containers/{0}/json", container_id)
    return int(api._result(api._get(url, params={"size": 1}), True).get("SizeRw") or 0)


def next_interval(took: float, used: int, threshold: int, rate: float) -> float:
    """Seconds to the next look: about a second, never more often than the measurement's
    cost allows, sooner when at `rate` bytes/s the limit is near."""
    interval = max(POLL_SEC, COST_FACTOR * took)
    if rate > 0:
        interval = min(interval, (threshold - used) / rate / 2)
    return min(max(interval, POLL_MIN_SEC, took), max(POLL_MAX_SEC, COST_FACTOR * took))


class DiskWatch:
    """Watches one container's disk against `limit_mb` while it lives; at the limit, kills it
    through the engine and remembers what it measured (`mark` puts it on a `Health`)."""

    def __init__(
        self,
        container_id: str,
        limit_mb: int,
        *,
        enforced: bool,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        """`attrs`: the engine's inspect of the container, when the caller has it (the
        create's), for the folders to walk; else the watch asks for it."""
        self.container_id = container_id
        self._attrs = attrs
        self.limit_mb = limit_mb
        self.enforced = enforced
        margin = ENFORCED_MARGIN if enforced else 0.0
        self.threshold = int(limit_mb * MIB * (1 - margin))
        self.used: int | None = None
        self.exceeded = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> DiskWatch:
        self._task = asyncio.ensure_future(self._watch())
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def mark(self, health: Health) -> Health:
        """`health` with what this watch saw."""
        if self.used is None:
            return health
        return health.model_copy(update={
            "storage_used_mb": self.used // MIB, "storage_limit_mb": self.limit_mb,
            "storage_exceeded": self.exceeded,
        })  # fmt: skip

    async def _measure(self, folders: list[Path] | None) -> int:
        if folders is not None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(_walks, _layer_bytes, folders)
        what = f"measure the disk of container {self.container_id[:12]}"
        return await docker_api.call(what, size_rw_blocking, self.container_id)

    async def _folders(self) -> list[Path] | None:
        """The host folders to walk, or None to ask the engine (`SizeRw`)."""
        if self._attrs is not None:
            return host_paths(self._attrs)
        what = f"inspect container {self.container_id[:12]}"
        api = docker_api.docker_client().api
        try:
            return host_paths(await docker_api.call(what, api.inspect_container, self.container_id))
        except SandboxNotFoundError:
            raise
        except SandboxError:
            return None  # the engine's own count will do

    async def _watch(self) -> None:
        try:
            folders = await self._folders()
            previous: tuple[float, int] | None = None
            while True:
                started = time.monotonic()
                try:
                    used = await self._measure(folders)
                except SandboxNotFoundError:
                    return
                except (SandboxError, OSError) as exc:  # a hiccup: look again shortly
                    log.warning("could not measure the disk of %s: %r", self.container_id, exc)
                    await asyncio.sleep(POLL_MAX_SEC)
                    continue
                now = time.monotonic()
                self.used = used
                if used >= self.threshold:
                    self.exceeded = True
                    await self._kill()
                    return
                rate = 0.0
                if previous is not None:
                    rate = (used - previous[1]) / max(now - previous[0], 1e-3)
                previous = (now, used)
                await asyncio.sleep(next_interval(now - started, used, self.threshold, rate))
        except SandboxNotFoundError:
            return  # removed: nothing left to watch

    async def _kill(self) -> None:
        """Stop every write at once: the engine kills the container (a stopped container's
        files can still be copied out)."""
        log.warning(
            "container %s wrote %d MiB, over its storage_mb=%d: killing it",
            self.container_id[:12], (self.used or 0) // MIB, self.limit_mb,
        )  # fmt: skip
        api = docker_api.docker_client().api
        with contextlib.suppress(SandboxError):  # gone or already stopped: nothing writes
            await docker_api.call(
                f"kill container {self.container_id[:12]}", api.kill, self.container_id
            )
