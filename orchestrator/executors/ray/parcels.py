"""Task folders carried to the nodes: packed once per content on the driver, unpacked once
per content on each node.

A task folder lives on the driver's disk; a node builds its image and copies it for each
trial, so the node needs the folder itself. The driver packs it (a deterministic tar), puts
it in Ray's object store once per content digest, and sends only a reference; a node fetches
and unpacks a digest it has not seen, once however many trials ask at the same time.

`TaskParcel` is a task as it travels; `Packer` the driver's side, `Unpacker` a node's.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import shutil
import tarfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from orchestrator.common.archive import tar_of_dir
from orchestrator.common.offload import run_blocking
from orchestrator.tasks.task import Task

KEEP_PARCELS = 256  # distinct task contents kept packed (driver) and unpacked (each node)


@dataclass(frozen=True)
class TaskParcel:
    """A task as it travels: the loaded model, its content digest and its packed folder.
    The reference is wrapped, so Ray does not fetch the folder before the node asks."""

    task: Task
    digest: str
    packed: tuple[Any, ...]  # (ray.ObjectRef,)


def _pack(folder: Path) -> tuple[str, bytes]:
    data = tar_of_dir(folder, folder.name)
    return hashlib.sha256(data).hexdigest(), data


class Packer:
    """The driver's side: a task's parcel, its folder put in the object store once."""

    def __init__(self) -> None:
        self._refs: OrderedDict[str, Any] = OrderedDict()

    async def parcel(self, task: Task) -> TaskParcel:
        digest, data = await run_blocking(_pack, task.path)
        ref = self._refs.get(digest)
        if ref is None:
            ref = self._refs[digest] = ray.put(data)
            while len(self._refs) > KEEP_PARCELS:
                self._refs.popitem(last=False)
        self._refs.move_to_end(digest)
        return TaskParcel(task, digest, (ref,))


def _unpack(data: bytes, where: Path) -> None:
    partial = where.with_name(where.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(partial, filter="data")  # no member may leave the folder
    partial.rename(where)


class Unpacker:
    """A node's side: the node's copy of a parcel's task, unpacked once per digest."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._ready: OrderedDict[str, Path] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Path]] = {}

    async def task(self, parcel: TaskParcel) -> Task:
        folder = self._ready.get(parcel.digest)
        if folder is None:
            pending = self._pending.get(parcel.digest)
            if pending is None:
                pending = asyncio.ensure_future(self._fetch(parcel))
                self._pending[parcel.digest] = pending
                pending.add_done_callback(lambda _: self._pending.pop(parcel.digest, None))
            folder = await asyncio.shield(pending)
        self._ready.move_to_end(parcel.digest)
        return parcel.task.model_copy(update={"path": folder / parcel.task.path.name})

    async def _fetch(self, parcel: TaskParcel) -> Path:
        data = await parcel.packed[0]
        where = self.root / parcel.digest
        if not await run_blocking(where.is_dir):
            await run_blocking(_unpack, data, where)
        self._ready[parcel.digest] = where
        while len(self._ready) > KEEP_PARCELS:
            _, old = self._ready.popitem(last=False)
            await run_blocking(shutil.rmtree, old, ignore_errors=True)
        return where
