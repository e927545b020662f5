"""The fake sandbox's filesystem: files and folders in memory, with modes and numeric owners.

Just enough of a POSIX tree for trialbox's own file traffic (archive copies, in
`archives.py`; a shell's redirections) and for the permission checks its security
guarantees rest on: a user other than root cannot read a root-only file, enter a 0700
folder, or write into a folder that is not theirs. There are no symlinks, no sticky-bit or
umask subtleties, no timestamps. Errors are the builtin `OSError`s with the words `sh`
would print (`strerror`).
"""

from __future__ import annotations

import errno
import posixpath
from dataclasses import dataclass, field

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


_WORDS = {
    errno.ENOENT: "No such file or directory",
    errno.EACCES: "Permission denied",
    errno.EISDIR: "Is a directory",
    errno.ENOTDIR: "Not a directory",
    errno.EEXIST: "File exists",
    errno.EPERM: "Operation not permitted",
}


def _error(kind: type[OSError], code: int, path: str) -> OSError:
    return kind(code, _WORDS[code], path)


def _allows(node: Node, who: Who, bit: int) -> bool:
    """Whether `who` has permission `bit` (4 read, 2 write, 1 execute) on `node`."""
    uid, gid = who
    if bit == 0:
        return True
    if uid == 0:  # root passes every check except executing a file with no x bit at all
        return bit != 1 or node.is_dir or bool(node.mode & 0o111)
    if uid == node.owner[0]:
        return bool(node.mode >> 6 & bit)
    if gid == node.owner[1]:
        return bool(node.mode >> 3 & bit)
    return bool(node.mode & bit)


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

    def _reach(self, path: str, who: Who) -> Node | None:
        """The node at `path` after checking `who` may enter every folder on the way."""
        path = self.norm(path)
        parent = posixpath.dirname(path)
        walked = "/"
        for part in [p for p in parent.split("/") if p]:
            walked = posixpath.join(walked, part)
            node = self._nodes.get(walked)
            if node is None:
                raise _error(FileNotFoundError, errno.ENOENT, path)
            if not node.is_dir:
                raise _error(NotADirectoryError, errno.ENOTDIR, path)
        for folder in _ancestors(parent):
            if not _allows(self._nodes[folder], who, 1):
                raise _error(PermissionError, errno.EACCES, path)
        return self._nodes.get(path)

    def check(self, path: str, who: Who, bit: int) -> Node:
        """The node at `path`, if `who` has permission `bit` on it."""
        node = self._reach(path, who)
        if node is None:
            raise _error(FileNotFoundError, errno.ENOENT, self.norm(path))
        if not _allows(node, who, bit):
            raise _error(PermissionError, errno.EACCES, self.norm(path))
        return node

    def read(self, path: str, who: Who = ROOT) -> bytes:
        node = self.check(path, who, 4)
        if node.is_dir:
            raise _error(IsADirectoryError, errno.EISDIR, self.norm(path))
        return bytes(node.data)

    def open_for_write(self, path: str, who: Who, *, append: bool = False) -> str:
        """Create or truncate a file as `who` would with `>` (or `>>`); returns its path."""
        path = self.norm(path)
        node = self._reach(path, who)
        if node is None:
            parent = self._nodes.get(posixpath.dirname(path))
            if parent is None or not parent.is_dir:
                raise _error(FileNotFoundError, errno.ENOENT, path)
            if not _allows(parent, who, 2):
                raise _error(PermissionError, errno.EACCES, path)
            self._nodes[path] = Node(False, 0o644, who)
        elif node.is_dir:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        elif not _allows(node, who, 2):
            raise _error(PermissionError, errno.EACCES, path)
        elif not append and path != DEV_NULL:
            node.data.clear()
        return path

    def append(self, path: str, data: bytes) -> None:
        """Write through an open file. A file removed meanwhile swallows the bytes, as an
        unlinked file still open would."""
        node = self._nodes.get(path)
        if node is not None and not node.is_dir and path != DEV_NULL:
            node.data += data

    def mkdir(
        self, path: str, who: Who = ROOT, *, parents: bool = False, mode: int = 0o755
    ) -> None:
        path = self.norm(path)
        if parents and posixpath.dirname(path) != path and not self.is_dir(posixpath.dirname(path)):
            self.mkdir(posixpath.dirname(path), who, parents=True, mode=mode)
        node = self._reach(path, who)
        if node is not None:
            if parents and node.is_dir:
                return
            raise _error(FileExistsError, errno.EEXIST, path)
        parent = self._nodes.get(posixpath.dirname(path))
        if parent is None:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        if not _allows(parent, who, 2):
            raise _error(PermissionError, errno.EACCES, path)
        self._nodes[path] = Node(True, mode, who)

    def remove(self, path: str, who: Who = ROOT, *, recursive: bool = False) -> None:
        path = self.norm(path)
        node = self._reach(path, who)
        if node is None or path == "/":
            raise _error(FileNotFoundError, errno.ENOENT, path)
        if node.is_dir and not recursive:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        if not _allows(self._nodes[posixpath.dirname(path)], who, 2):
            raise _error(PermissionError, errno.EACCES, path)
        for name in [n for n in self._nodes if n == path or n.startswith(path + "/")]:
            del self._nodes[name]

    def chmod(self, path: str, mode: int, who: Who = ROOT) -> None:
        node = self.check(path, who, 0)
        if who[0] not in (0, node.owner[0]):
            raise _error(PermissionError, errno.EPERM, self.norm(path))
        node.mode = mode

    def put(self, path: str, data: bytes, *, mode: int = 0o644, owner: Who = ROOT) -> None:
        """Write a file as the engine does for an upload: parents made (root, 0755), no checks."""
        path = self.norm(path)
        self._make_parents(path)
        self._nodes[path] = Node(False, mode, owner, bytearray(data))

    def _make_parents(self, path: str) -> None:
        for folder in reversed(list(_ancestors(posixpath.dirname(path)))):
            self._nodes.setdefault(folder, Node(True, 0o755, ROOT))

    def put_dir(self, path: str, *, mode: int = 0o755, owner: Who = ROOT) -> None:
        """Make (or re-own) a folder as the engine does for an upload: no checks."""
        path = self.norm(path)
        self._make_parents(path)
        node = self._nodes.get(path)
        if node is not None and node.is_dir:
            node.mode, node.owner = mode, owner
        else:
            self._nodes[path] = Node(True, mode, owner)

    def walk(self, path: str) -> list[tuple[str, Node]]:
        """`path` and everything under it, sorted; FileNotFoundError when it is not there."""
        path = self.norm(path)
        if path not in self._nodes:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        inside = [n for n in self._nodes if n == path or n.startswith(path.rstrip("/") + "/")]
        return [(name, self._nodes[name]) for name in sorted(inside)]


def _ancestors(folder: str) -> list[str]:
    """`folder` and every folder above it, from the deepest up to `/`."""
    found = []
    while True:
        found.append(folder)
        if folder == "/":
            return found
        folder = posixpath.dirname(folder)
