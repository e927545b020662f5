"""Archives in and out of the fake filesystem, as the engine's archive copies behave.

An upload keeps each member's mode and numeric owner, and an existing folder takes the
archive's (Docker's extraction does the same); links and special files are skipped. A
download names members from the copied path's last component and is unpacked on the host by
the archive module's `extract_stream`, the very function the Docker backend uses, so the cap
and its truncation note are the same.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path

from orchestrator.backends.fake.files import FakeFiles
from orchestrator.common.archive import extract_stream, tar_of_files


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
