"""Walking a task folder safely: nothing outside it is read, nothing special is copied.

A symlink that leaves the folder, or a device, FIFO or socket inside it, would let a task
reach the host; both the trial's copy and an image's build context go through `check_tree`.

`checksum_tree` is the folder's content hash, a trial's `task_checksum`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from orchestrator.common.errors import TaskError


def kind_of(mode: int) -> str:
    """What a file mode says an entry is, for error messages."""
    kinds = (
        (stat.S_ISREG, "regular file"), (stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    )  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "special file")


def link_target(path: Path, root: Path) -> Path:
    """Where the symlink `path` leads, refused when that is outside `root` or a loop."""
    try:
        target = path.resolve()
    except (RuntimeError, OSError) as exc:  # a loop: RuntimeError up to 3.12, OSError after
        raise TaskError(f"{path}: a symlink that cannot be resolved ({exc})") from exc
    if not target.is_relative_to(root):
        raise TaskError(f"{path}: a symlink pointing outside the task ({target})")
    return target


def _unreadable(error: OSError) -> None:
    raise TaskError(f"{error.filename}: cannot be read ({error.strerror})") from error


def check_tree(root: Path) -> list[Path]:
    """Every entry under `root`, sorted; refuses escaping symlinks, special files (FIFOs,
    sockets, devices) and folders it cannot read. Only stats; never opens a file."""
    entries: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_unreadable, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                link_target(path, root)
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise TaskError(
                    f"{path}: is a {kind_of(mode)}, not a regular file or folder (a special "
                    "file is refused: reading it could block or reach the host)"
                )
            entries.append(path)
    return entries


def checksum_tree(root: Path, entries: list[Path]) -> str:
    """A content hash of a task folder: names, link targets, executable bits and bytes."""
    digest = hashlib.sha256()
    for path in entries:
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L\0{name}\0{os.readlink(path)}\0".encode())
        elif path.is_file():
            executable = path.stat().st_mode & 0o111 != 0
            digest.update(f"F\0{name}\0{executable:d}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def read_tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under `root` (links inside it followed) as (bytes, mode)."""
    files: dict[str, tuple[bytes, int]] = {}
    for path in check_tree(root):
        if path.is_file():
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            files[path.relative_to(root).as_posix()] = (path.read_bytes(), mode)
    return files
