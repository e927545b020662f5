"""Files placed in a created container before its start (`SandboxSpec.files`: a trial's /logs),
so they are there from its first instant and no copy follows the start.

The engine's own copy (`put_archive`) works on a created container too, but costs the same
there: a fixed 55-70 ms on two cores, since Docker runs a helper process to unpack every
archive, and it holds the container while it does, so it cannot overlap the start either
(docs/benchmarks.md). Where the container's writable layer is a plain folder of this host, the
archive is written into that folder instead (about 2 ms): the engine is local, its driver
overlay2 or fuse-overlayfs (whose upper folder is what the container writes, merged over its
image), the folder is root's and empty (no user namespace, no rootless engine: the sandbox's
root is this host's, and this process is root), the host has no SELinux, and no mount of the
container meets a path of the archive (those the engine's copy would write into). Before the
start nothing is mounted over that folder, and the result is the engine copy's: the same
names, modes, numeric owners and times, folders merged with the image's. An archive with
anything but folders and regular files, or a file whose folder it does not hold itself, and
any failure part-way, take the engine's copy, which overwrites the same names.

`place_files` is the one entry point.
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.inspection import engine_is_local
from orchestrator.common.errors import SandboxConflictError, SandboxError
from orchestrator.common.offload import run_blocking

log = logging.getLogger(__name__)

LAYER_DRIVERS = frozenset({"overlay2", "fuse-overlayfs"})  # the upper folder is the layer
SELINUX = Path("/sys/fs/selinux/enforce")  # files written here would miss the engine's labels


@dataclass(frozen=True)
class Member:
    """One entry of the archive: a folder (`data` None) or a regular file."""

    name: str
    data: bytes | None
    mode: int
    uid: int
    gid: int
    mtime: int


def layer_members(archive: bytes) -> list[Member] | None:
    """The archive's entries, parents first, when each is a folder or a regular file at a
    plain relative path whose folder is the archive's root or a folder it holds; else None."""
    members: list[Member] = []
    dirs: set[str] = set()
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            for info in tar:
                name = info.name
                if (
                    not (info.isdir() or (info.isreg() and not info.issparse()))
                    or posixpath.normpath(name) != name
                    or name.startswith(("/", "../"))
                    or name in ("", ".", "..")
                    or name in seen
                    or posixpath.dirname(name) not in dirs | {""}
                    or any(key.startswith("SCHILY.xattr.") for key in info.pax_headers)
                ):
                    return None
                seen.add(name)
                data = None
                if info.isdir():
                    dirs.add(name)
                else:
                    source = tar.extractfile(info)
                    if source is None:
                        return None
                    data = source.read()
                mode = info.mode & 0o7777
                members.append(Member(name, data, mode, info.uid, info.gid, int(info.mtime)))
    except tarfile.TarError:
        return None  # the engine's copy says what is wrong with it
    return members


def _meets(names: Iterable[str], destinations: Iterable[str]) -> bool:
    """Whether a mount at one of `destinations` holds or hides one of the archive's `names`."""
    for destination in destinations:
        mount = posixpath.normpath("/" + destination).lstrip("/")
        for name in names:
            if not mount or name == mount or name.startswith(mount + "/"):
                return True
            if mount.startswith(name + "/"):
                return True
    return False


def _mount_destinations(attrs: Mapping[str, Any]) -> list[str]:
    host = attrs.get("HostConfig") or {}
    found = [str(m.get("Destination") or "") for m in attrs.get("Mounts") or []]
    found += [str(m.get("Target") or "") for m in host.get("Mounts") or []]
    found += [str(bind).split(":")[1] for bind in host.get("Binds") or [] if ":" in str(bind)]
    found += [str(target) for target in host.get("Tmpfs") or {}]
    return found


def writable_layer(attrs: Mapping[str, Any], names: Sequence[str]) -> Path | None:
    """The created container's writable layer as a folder of this host that `names` may be
    written into directly (the conditions in this module's docstring), else None."""
    driver = attrs.get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if (
        not upper
        or driver.get("Name") not in LAYER_DRIVERS
        or not engine_is_local()
        or os.geteuid() != 0
        or SELINUX.exists()
        or _meets(names, _mount_destinations(attrs))
    ):
        return None
    try:
        found = os.lstat(upper)
        if not stat.S_ISDIR(found.st_mode) or (found.st_uid, found.st_gid) != (0, 0):
            return None
        if os.listdir(upper):
            return None  # written already: not the fresh layer of a container just created
    except OSError:
        return None  # not a folder of this host (an engine in another filesystem)
    return Path(upper)


def write_layer(upper: Path, members: Sequence[Member]) -> None:
    """Write `members` into the empty folder `upper`: each made new (never through a link),
    then owners, modes and times set as the engine's copy sets them (folders last, so what
    was made in them leaves their times alone)."""
    made_dirs: list[tuple[str, Member]] = []
    for member in members:
        target = os.path.join(upper, member.name)
        if member.data is None:
            os.mkdir(target, 0o700)
            made_dirs.append((target, member))
            continue
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(target, flags, 0o600)
        try:
            view = memoryview(member.data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchown(fd, member.uid, member.gid)
            os.fchmod(fd, member.mode)  # after the owner: a chown clears set-id bits
            os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)
    for target, member in reversed(made_dirs):
        os.chown(target, member.uid, member.gid, follow_symlinks=False)
        os.chmod(target, member.mode)
        os.utime(target, (member.mtime, member.mtime), follow_symlinks=False)


def _write_directly(attrs: Mapping[str, Any], archive: bytes) -> bool:
    """The archive written into the container's layer; False when it must be the engine's
    copy (the conditions do not hold, or a write failed: the copy overwrites what it made)."""
    members = layer_members(archive)
    if not members:
        return False
    upper = writable_layer(attrs, [member.name for member in members])
    if upper is None:
        return False
    try:
        write_layer(upper, members)
    except OSError as exc:
        log.debug("not written into the layer %s (%s): the engine copies them", upper, exc)
        return False
    return True


async def place_files(container_id: str, attrs: Mapping[str, Any], archive: bytes) -> None:
    """Extract `archive` at / in the created, not yet started, container `container_id`
    (`attrs`: the engine's inspect of it); an engine error is a `SandboxError`."""
    if await run_blocking(_write_directly, attrs, archive):
        return
    what = f"place files in {container_id[:12]} before its start"
    api = docker_api.docker_client().api
    try:
        placed = await docker_api.call(what, api.put_archive, container_id, "/", archive)
    except SandboxConflictError as exc:  # not the create's name conflict: ours to remove
        raise SandboxError(str(exc)) from exc
    if not placed:
        raise SandboxError(f"{what}: the engine refused the archive")
