"""The fake sandbox's filesystem: files and folders in memory, each with the mode an upload
gave it. Permissions and owners are not modelled (the engine's are proven on Docker); there
are no symlinks. Errors are the builtin `OSError`s.

Archives in and out behave as the engine's copies: an upload keeps each member's mode (an
existing folder takes the archive's), links and special files are skipped; a download names
members from the copied path's last component, for the host to unpack with
`common.archive.extract_stream`, as the Docker backend does.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import tarfile
from dataclasses import dataclass, field

from orchestrator.common.archive import tar_of_files


@dataclass
class Node:
    """One file or folder."""

    is_dir: bool
    mode: int
    data: bytearray = field(default_factory=bytearray)


def _error(kind: type[OSError], code: int, path: str) -> OSError:
    return kind(code, os.strerror(code), path)


class FakeFiles:
    """A tree of `Node`s keyed by normalised absolute path."""

    def __init__(self) -> None:
        self._nodes = {"/": Node(True, 0o755), "/tmp": Node(True, 0o1777)}

    @staticmethod
    def norm(path: str, cwd: str = "/") -> str:
        return posixpath.normpath(posixpath.join(cwd, path)).replace("//", "/")

    def get(self, path: str) -> Node | None:
        return self._nodes.get(self.norm(path))

    def read(self, path: str) -> bytes:
        node = self.get(path)
        if node is None:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        if node.is_dir:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        return bytes(node.data)

    def write(self, path: str, data: bytes, *, append: bool = False) -> None:
        """Write (or append to) a file in a folder that exists, as `>` does."""
        path = self.norm(path)
        folder = self._nodes.get(posixpath.dirname(path))
        if path not in self._nodes and (folder is None or not folder.is_dir):
            raise _error(FileNotFoundError, errno.ENOENT, path)
        node = self._nodes.setdefault(path, Node(False, 0o644))
        if node.is_dir:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        if not append:
            node.data.clear()
        node.data += data

    def makedirs(self, path: str) -> None:
        """`mkdir -p`: the folder and its missing parents."""
        node = self.get(path)
        if node is None:
            self.put_dir(path)
        elif not node.is_dir:
            raise _error(FileExistsError, errno.EEXIST, path)

    def put(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write a file as the engine does for an upload: missing parents made."""
        path = self.norm(path)
        self._make_parents(path)
        self._nodes[path] = Node(False, mode, bytearray(data))

    def put_dir(self, path: str, *, mode: int = 0o755) -> None:
        """Make a folder (or give one this mode) as the engine does for an upload."""
        path = self.norm(path)
        self._make_parents(path)
        self._nodes[path] = Node(True, mode)  # what is inside has paths of its own

    def _make_parents(self, path: str) -> None:
        folder = posixpath.dirname(path)
        while folder not in self._nodes:
            self._nodes[folder] = Node(True, 0o755)
            folder = posixpath.dirname(folder)

    def remove(self, path: str) -> None:
        """`path` and everything under it, if there (`rm -rf`)."""
        for name in self._under(self.norm(path)):
            del self._nodes[name]

    def walk(self, path: str) -> list[tuple[str, Node]]:
        """`path` and everything under it, sorted; FileNotFoundError when it is not there."""
        path = self.norm(path)
        if path not in self._nodes:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        return [(name, self._nodes[name]) for name in self._under(path)]

    def _under(self, path: str) -> list[str]:
        inside = path.rstrip("/") + "/"
        return sorted(name for name in self._nodes if name == path or name.startswith(inside))


def extract_tar(files: FakeFiles, tar_bytes: bytes, at: str) -> None:
    """Unpack a tar at folder `at`; FileNotFoundError when `at` is not a folder."""
    folder = files.get(at)
    if folder is None or not folder.is_dir:
        raise _error(FileNotFoundError, errno.ENOENT, files.norm(at))
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as archive:
        for member in archive:
            target = files.norm(member.name, at)
            if member.isdir():
                files.put_dir(target, mode=member.mode)
            elif member.isfile():
                source = archive.extractfile(member)
                assert source is not None
                files.put(target, source.read(), mode=member.mode)


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
