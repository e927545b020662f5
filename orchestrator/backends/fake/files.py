"""The fake sandbox's filesystem: files and folders in memory, each with a mode and a numeric
owner that uploads keep and downloads carry. Permissions are not enforced (the engine's are
proven on Docker); there are no symlinks. Errors are the builtin `OSError`s.

Archives in and out behave as the engine's copies: an upload keeps each member's mode and
owner (an existing folder takes the archive's), links and special files are skipped; a
download names members from the copied path's last component and is unpacked on the host by
`common.archive.extract_stream`, the very function the Docker backend uses, so the cap and
its truncation note are the same.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.common.archive import extract_stream, tar_of_files

Who = tuple[int, int]
ROOT: Who = (0, 0)
DEV_NULL = "/dev/null"


@dataclass
class Node:
    """One file or folder."""

    is_dir: bool
    mode: int
    owner: Who
    data: bytearray = field(default_factory=bytearray)


def _error(kind: type[OSError], code: int, path: str) -> OSError:
    return kind(code, os.strerror(code), path)


class FakeFiles:
    """A tree of `Node`s keyed by normalised absolute path."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {"/": Node(True, 0o755, ROOT)}
        for path, mode in (("/tmp", 0o1777), ("/root", 0o700), ("/dev", 0o755)):
            self._nodes[path] = Node(True, mode, ROOT)
        self._nodes[DEV_NULL] = Node(False, 0o666, ROOT)

    @staticmethod
    def norm(path: str, cwd: str = "/") -> str:
        return posixpath.normpath(posixpath.join(cwd, path)).replace("//", "/")

    def get(self, path: str) -> Node | None:
        return self._nodes.get(self.norm(path))

    def is_dir(self, path: str) -> bool:
        node = self.get(path)
        return node is not None and node.is_dir

    def read(self, path: str) -> bytes:
        node = self.get(path)
        if node is None:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        if node.is_dir:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        return bytes(node.data)

    def write(self, path: str, data: bytes, *, append: bool = False, owner: Who = ROOT) -> None:
        """Write (or append to) a file whose folder exists, as `>` and `>>` do."""
        path = self.norm(path)
        node = self._nodes.get(path)
        if node is None:
            if not self.is_dir(posixpath.dirname(path)):
                raise _error(FileNotFoundError, errno.ENOENT, path)
            node = self._nodes[path] = Node(False, 0o644, owner)
        if node.is_dir:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        if path != DEV_NULL:
            node.data[:] = node.data + data if append else data

    def mkdir(self, path: str, *, parents: bool = False, owner: Who = ROOT) -> None:
        path = self.norm(path)
        if self.is_dir(path) and parents:
            return
        if path in self._nodes:
            raise _error(FileExistsError, errno.EEXIST, path)
        if not self.is_dir(posixpath.dirname(path)):
            if not parents:
                raise _error(FileNotFoundError, errno.ENOENT, path)
            self.mkdir(posixpath.dirname(path), parents=True, owner=owner)
        self._nodes[path] = Node(True, 0o755, owner)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        path = self.norm(path)
        node = self._nodes.get(path)
        if node is None or path == "/":
            raise _error(FileNotFoundError, errno.ENOENT, path)
        if node.is_dir and not recursive:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        for name in [n for n in self._nodes if n == path or n.startswith(path + "/")]:
            del self._nodes[name]

    def put(self, path: str, data: bytes, *, mode: int = 0o644, owner: Who = ROOT) -> None:
        """Write a file as the engine does for an upload: parents made (root, 0755)."""
        path = self.norm(path)
        self._make_parents(path)
        self._nodes[path] = Node(False, mode, owner, bytearray(data))

    def put_dir(self, path: str, *, mode: int = 0o755, owner: Who = ROOT) -> None:
        """Make (or re-own) a folder as the engine does for an upload."""
        path = self.norm(path)
        self._make_parents(path)
        node = self._nodes.get(path)
        if node is not None and node.is_dir:
            node.mode, node.owner = mode, owner
        else:
            self._nodes[path] = Node(True, mode, owner)

    def _make_parents(self, path: str) -> None:
        folder = posixpath.dirname(path)
        while folder not in self._nodes:
            self._nodes[folder] = Node(True, 0o755, ROOT)
            folder = posixpath.dirname(folder)

    def walk(self, path: str) -> list[tuple[str, Node]]:
        """`path` and everything under it, sorted; FileNotFoundError when it is not there."""
        path = self.norm(path)
        if path not in self._nodes:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        inside = [n for n in self._nodes if n == path or n.startswith(path.rstrip("/") + "/")]
        return [(name, self._nodes[name]) for name in sorted(inside)]


def extract_tar(files: FakeFiles, tar_bytes: bytes, at: str) -> None:
    """Unpack a tar at folder `at`; FileNotFoundError when `at` is not a folder."""
    if not files.is_dir(at):
        raise FileNotFoundError(2, "No such file or directory", files.norm(at))
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as archive:
        for member in archive:
            target = files.norm(member.name, files.norm(at))
            owner = (member.uid, member.gid)
            if member.isdir():
                files.put_dir(target, mode=member.mode, owner=owner)
            elif member.isfile():
                source = archive.extractfile(member)
                assert source is not None
                files.put(target, source.read(), mode=member.mode, owner=owner)


def tar_of(files: FakeFiles, path: str) -> bytes:
    """A tar of `path` named from its last component; FileNotFoundError when it is missing."""
    base = posixpath.dirname(files.norm(path))
    contents: dict[str, bytes | tuple[bytes, int]] = {}
    dirs: dict[str, int] = {}
    for name, node in files.walk(path):
        relative = posixpath.relpath(name, base)
        if node.is_dir:
            dirs[relative] = node.mode
        else:
            contents[relative] = (bytes(node.data), node.mode)
    return tar_of_files(contents, dirs=dirs)


def write_capped(archive: bytes, dest: Path, *, file_cap: int) -> list[str]:
    """Unpack a tar made by `tar_of` into the host folder `dest`, each file cut at `file_cap`
    with the archive module's note; returns the files cut. Blocking host work:
    run it off the loop."""
    dest.mkdir(parents=True, exist_ok=True)
    return extract_stream([archive], dest, file_cap=file_cap)
