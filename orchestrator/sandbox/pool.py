"""Warm pools: started, never-used sandboxes that a trial or a session takes instead of
creating one, so the create and start leave the critical path of the rollout.

A pool holds sandboxes by shape: everything of a `SandboxSpec` but the trial's identity (its
trial id, jobs folder), its `files` (its /logs) and its slot folder. Nothing of a trial
reaches a sandbox before it is taken: the task's environment is part of the shape (the same
for every trial of a task), and the trial's credentials and variables travel with each
command as they always do. When taken, it gets the trial's name (`PoolableSandbox.adopt`: a
rename; labels cannot change on Docker, so a pooled sandbox keeps the pool's `trialbox.trial`,
which starts with `pool__`) and its files: where it has a slot folder (`SandboxSpec.slot_mount`,
every pooled sandbox has one where the backend can mount host folders) it was made with links
in place of the shape's files, pointing into that folder, and the trial's files are written
there on this host, with no copy through the engine; else they are uploaded. The trial's model
gateway binds its socket into that same folder, as for any trial's sandbox.

A sandbox is handed out at most once, and only if it is pristine (running, healthy, nothing
ever ran in it: `PoolableSandbox.pristine`); one that is not is removed. A pool learns a
shape from the first trial that asks for it (that trial creates its own sandbox) and is
refilled in the background after every take, bounded by `size` per shape, `max_sandboxes`
in all and the engine's memory. A trial that finds none waiting while one is being made
waits for that one rather than create its own: the refill is nearer done. Pooled sandboxes
are made by this process with the usual labels, so `trialbox reap` finds them after a crash;
`aclose` removes the idle ones.

`PooledBackend` is the whole of it: a `Backend` over another, whose `create_sandbox` takes
from the pool when it can.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import logging
import tarfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from orchestrator.common.ids import new_id
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import finish_shielded
from orchestrator.sandbox.backend import (
    Backend,
)
from orchestrator.sandbox.protocol import Sandbox, SlotSandbox
from orchestrator.sandbox.spec import SLOT_DIR, SandboxSpec
from orchestrator.sandbox.wrapper import BackendWrapper

log = logging.getLogger(__name__)

INPUTS = "inputs"  # in a pooled sandbox's slot folder: its trial's files, which its /logs links to
POOL_PREFIX = "pool"  # a pooled sandbox's trial id is `pool__<8 hex>`: whose it becomes is its name
REFILL_PAUSE_SEC = 30.0  # after a failed create, a shape is not refilled for this long


@runtime_checkable
class PoolableSandbox(Protocol):
    """A sandbox that can wait in a pool and become a trial's when taken."""

    async def pristine(self) -> bool:
        """Running, healthy, and nothing ever ran in it (by the engine's account)."""
        ...

    async def adopt(self, spec: SandboxSpec) -> None:
        """Become `spec`'s sandbox: its name (and, where the engine allows, its identity)."""
        ...

    @property
    def adopted(self) -> bool:
        """Whether it came from a pool (was adopted by a trial)."""
        ...


def shape_of(spec: SandboxSpec) -> str:
    """What two specs must share for a sandbox made for one to serve the other."""
    return spec.model_dump_json(exclude={"trial_id", "jobs_dir", "files", "slot_mount"})


def _members(files: bytes | None) -> tuple[tuple[str, str, int, int, int], ...] | None:
    """A `files` archive's members, (name, "d" or "f", mode, uid, gid) each, when each is a
    folder or a regular file; else None."""
    if files is None:
        return None
    found = []
    with tarfile.open(fileobj=io.BytesIO(files), mode="r:") as archive:
        for info in archive:
            if not (info.isdir() or info.isreg()):
                return None
            kind = "d" if info.isdir() else "f"
            found.append((info.name, kind, info.mode, info.uid, info.gid))
    return tuple(found)


def _linked(files: bytes, slot_mount: str) -> bytes:
    """`files` as a pooled sandbox is made with them: its folders as they are, and each of
    its files a link to `<slot_mount>/inputs/<its path>`, which the taken trial's copy fills."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(files), mode="r:") as archive,
        tarfile.open(fileobj=out, mode="w") as linked,
    ):
        for info in archive:
            if info.isdir():
                linked.addfile(info)
                continue
            link = tarfile.TarInfo(info.name)
            link.type, link.mode = tarfile.SYMTYPE, 0o777
            link.linkname = f"{slot_mount}/{INPUTS}/{info.name}"
            linked.addfile(link)
    return out.getvalue()


def _write_inputs(folder: Path, files: bytes) -> None:
    """The archive's files into the slot folder's `inputs/`, readable by every user (the
    folder is mounted read-only: no user in the sandbox can change them)."""
    with tarfile.open(fileobj=io.BytesIO(files), mode="r:") as archive:
        for info in archive:
            source = archive.extractfile(info) if info.isreg() else None
            if source is None:
                continue
            target = folder / INPUTS / info.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
            target.chmod(0o644)


@dataclass
class _Shape:
    """One shape's pool: the spec it makes sandboxes from, the idle ones, those being made,
    and, where pooled sandboxes have slot folders, the files they are made with (`_linked`)
    and the layout a trial's files must have to use them."""

    spec: SandboxSpec
    linked: bytes | None = None
    layout: tuple[tuple[str, str, int, int, int], ...] | None = None
    idle: deque[Sandbox] = field(default_factory=deque)
    making: set[asyncio.Task[None]] = field(default_factory=set)
    paused_until: float = 0.0

    @property
    def held(self) -> int:
        return len(self.idle) + len(self.making)


class PooledBackend(BackendWrapper):
    """`inner`'s sandboxes, taken from warm pools when one of the shape waits."""

    def __init__(
        self,
        inner: Backend,
        *,
        size: int,
        max_sandboxes: int | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a warm pool holds at least 1 sandbox per shape, not {size}")
        super().__init__(inner)
        self.size = size
        self.max_sandboxes = max_sandboxes if max_sandboxes is not None else 4 * size
        self.taken = 0  # how many trials took a pooled sandbox
        self._shapes: dict[str, _Shape] = {}
        self._memory_mb: int | None = None  # the engine's, read with the first create
        self._slot_mount: str | None = None  # each pooled sandbox's own slot folder, if any
        self._closed = False

    # -- sandboxes --------------------------------------------------------------------------

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A pristine pooled sandbox of `spec`'s shape, adopted, with `spec.files` in it;
        else a new one (and the pool learns the shape). Either way the pool is refilled."""
        if self._closed or spec.service_network is not None:  # its network is the trial's
            return await self.inner.create_sandbox(spec)
        if self._memory_mb is None:  # the bound on what the pools hold (backends cache it)
            capabilities = await self.inner.capabilities()
            self._memory_mb = capabilities.memory_mb
            # A pooled sandbox gets a slot folder wherever one can be mounted, so a trial with
            # a model gateway can take it as well as one without.
            self._slot_mount = SLOT_DIR if capabilities.host_mounts else None
        key = shape_of(spec)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape(spec)
            layout = _members(spec.files)
            if self._slot_mount is not None and spec.files is not None and layout is not None:
                shape.linked, shape.layout = _linked(spec.files, self._slot_mount), layout
        try:
            taken = await self._take(shape, spec)
        finally:
            self._refill(shape)
        if taken is not None:
            return taken
        return await self.inner.create_sandbox(spec)

    async def _take(self, shape: _Shape, spec: SandboxSpec) -> Sandbox | None:
        """A waiting sandbox, or one being made (a refill under way is nearer done than a
        create this trial would start; a trial shorter than a create finds one so); None
        when the shape has neither."""
        if spec.slot_mount not in (None, self._slot_mount):
            return None  # it needs a slot folder elsewhere than pooled sandboxes have theirs
        while not shape.idle and shape.making:
            await asyncio.wait(set(shape.making), return_when=asyncio.FIRST_COMPLETED)
        while shape.idle:
            sandbox = shape.idle.popleft()
            try:
                if not isinstance(sandbox, PoolableSandbox) or not await sandbox.pristine():
                    raise _NotPristine
                await sandbox.adopt(spec)
                await self._place_files(shape, sandbox, spec.files)
            except BaseException as exc:  # never handed out: removed, whatever cancels come
                cancelled = isinstance(exc, asyncio.CancelledError)
                await finish_shielded(sandbox.destroy(), cancelled=cancelled)
                if not isinstance(exc, Exception):
                    raise
                if not isinstance(exc, _NotPristine):
                    log.warning("a pooled sandbox could not be taken (%s): removed", exc)
                continue
            self.taken += 1
            return sandbox
        return None

    @staticmethod
    async def _place_files(shape: _Shape, sandbox: Sandbox, files: bytes | None) -> None:
        """The trial's files in its pooled sandbox: written into the sandbox's slot folder
        on this host, where its links point, when they have the shape's layout (no engine
        call); else copied in."""
        if files is None:
            return
        folder = sandbox.slot_folder if isinstance(sandbox, SlotSandbox) else None
        if folder is not None and shape.layout is not None and _members(files) == shape.layout:
            await run_blocking(_write_inputs, folder, files)
        else:
            await sandbox.upload(files, "/")

    def _refill(self, shape: _Shape) -> None:
        """Start making sandboxes for `shape` up to its size, within the bounds."""
        if self._closed or time.monotonic() < shape.paused_until:
            return
        while shape.held < self.size and self._room_for(shape.spec):
            # In a context of its own: the pool's work is no trial's (engine_calls.py).
            making = asyncio.create_task(
                self._make(shape), name="warm pool refill", context=contextvars.Context()
            )
            shape.making.add(making)
            making.add_done_callback(shape.making.discard)

    def _room_for(self, spec: SandboxSpec) -> bool:
        """Another sandbox of `spec` stays within `max_sandboxes` and, once the engine's
        memory is known, within it (counting every held sandbox at its memory limit)."""
        held = [(s.held, s.spec.memory_mb) for s in self._shapes.values()]
        if sum(count for count, _ in held) >= self.max_sandboxes:
            return False
        memory = self._memory_mb
        return memory is None or sum(c * m for c, m in held) + spec.memory_mb <= memory

    async def _make(self, shape: _Shape) -> None:
        update = {
            "trial_id": new_id(POOL_PREFIX),
            "files": shape.linked,
            "slot_mount": self._slot_mount,
        }
        spec = shape.spec.model_copy(update=update)
        try:
            sandbox = await self.inner.create_sandbox(spec)
        except Exception as exc:
            shape.paused_until = time.monotonic() + REFILL_PAUSE_SEC
            log.warning(
                "a warm pool's sandbox could not be made (%s); that pool is not refilled for %g s",
                exc,
                REFILL_PAUSE_SEC,
            )
            return
        if self._closed:
            await finish_shielded(sandbox.destroy(), cancelled=False)
            return
        shape.idle.append(sandbox)

    # -- shutdown ---------------------------------------------------------------------------

    @property
    def idle(self) -> int:
        """Sandboxes waiting in the pools now."""
        return sum(len(s.idle) for s in self._shapes.values())

    async def wait_filled(self) -> None:
        """Until no refill is under way (tests, benchmarks)."""
        while making := [t for s in self._shapes.values() for t in s.making]:
            await asyncio.gather(*making, return_exceptions=True)

    async def aclose(self) -> None:
        """Remove every idle sandbox and stop refilling; a sandbox being made is removed
        once made (its create is never cut in two). Taken sandboxes are their trials'."""
        self._closed = True
        making = [t for s in self._shapes.values() for t in s.making]
        idle = [sb for s in self._shapes.values() for sb in s.idle]
        for s in self._shapes.values():
            s.idle.clear()
        results = await asyncio.gather(
            *making, *(sb.destroy() for sb in idle), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.warning("a warm pool's sandbox was not removed at shutdown: %s", result)


class _NotPristine(Exception):
    """A pooled sandbox something ran in, or whose health is not good."""
