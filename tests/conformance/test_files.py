"""Files in and out, on every backend: tar uploads keep modes and owners, a spec's `files` are
there once the sandbox is, `upload_file` sets both, downloads cut each file at the cap with the
archive module's note and count the cuts, and a missing path is a `SandboxError`."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.common.archive import TRUNCATION_NOTE, tar_of_files
from orchestrator.common.errors import SandboxError
from tests.conformance.conftest import BackendUnderTest


async def test_an_uploaded_tar_comes_back_the_same(
    backend: BackendUnderTest, tmp_path: Path
) -> None:
    archive = tar_of_files(
        {"box/a.txt": b"alpha\n", "box/deep/b.txt": (b"beta\n", 0o600)},
        dirs={"box": 0o755, "box/deep": 0o755},
    )
    async with backend.sandbox() as sandbox:
        await sandbox.upload(archive, "/tmp")
        inside = await sandbox.exec("cat /tmp/box/a.txt /tmp/box/deep/b.txt")
        cut = await sandbox.download("/tmp/box", tmp_path, file_cap=1024)

    assert inside.output == "alpha\nbeta\n"
    assert cut == []
    assert (tmp_path / "box" / "a.txt").read_bytes() == b"alpha\n"
    assert (tmp_path / "box" / "deep" / "b.txt").read_bytes() == b"beta\n"


async def test_files_in_the_spec_are_there_once_the_sandbox_is(
    backend: BackendUnderTest, tmp_path: Path
) -> None:
    archive = tar_of_files(
        {"box/a.txt": b"alpha\n", "box/deep/b.txt": (b"beta\n", 0o600)},
        dirs={"box": 0o755, "box/deep": 0o777},
    )
    async with backend.sandbox(files=archive) as sandbox:
        inside = await sandbox.exec("cat /box/a.txt /box/deep/b.txt")
        cut = await sandbox.download("/box", tmp_path, file_cap=1024)

    assert inside.output == "alpha\nbeta\n"
    assert cut == []
    assert (tmp_path / "box" / "deep" / "b.txt").read_bytes() == b"beta\n"


async def test_an_uploaded_tar_keeps_modes_and_owners(backend: BackendUnderTest) -> None:
    archive = tar_of_files(
        {"rootonly.txt": (b"root's\n", 0o600), "open.txt": (b"anyone's\n", 0o644)}
    )
    mine = tar_of_files({"mine.txt": (b"nobody's\n", 0o600)}, owner=(65534, 65534))
    async with backend.sandbox() as sandbox:
        await sandbox.upload(archive, "/tmp")
        await sandbox.upload(mine, "/tmp")
        denied = await sandbox.exec("cat /tmp/rootonly.txt", user="nobody")
        shown = await sandbox.exec("cat /tmp/open.txt /tmp/mine.txt", user="nobody")

    assert denied.exit_code == 1
    assert "Permission denied" in denied.output
    assert (shown.exit_code, shown.output) == (0, "anyone's\nnobody's\n")


async def test_a_download_cuts_each_file_at_the_cap_and_counts_the_cuts(
    backend: BackendUnderTest, tmp_path: Path
) -> None:
    async with backend.sandbox() as sandbox:
        made = await sandbox.exec(
            "mkdir -p /tmp/out && echo 0123456789abcdef > /tmp/out/big.txt"
            " && echo ok > /tmp/out/small.txt"
        )
        assert made.exit_code == 0, made.output
        cut = await sandbox.download("/tmp/out", tmp_path, file_cap=8)

    assert cut == ["out/big.txt"]
    assert (tmp_path / "out" / "big.txt").read_bytes() == b"01234567" + TRUNCATION_NOTE % 8
    assert (tmp_path / "out" / "small.txt").read_bytes() == b"ok\n"


async def test_upload_file_sets_mode_and_owner(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        await sandbox.upload_file("/tmp/theirs.txt", b"for nobody\n", owner=(65534, 65534))
        await sandbox.upload_file("/tmp/roots.txt", b"for root\n")
        await sandbox.upload_file("/tmp/new-folder/tool.sh", b"echo tool\n", mode=0o755)
        theirs = await sandbox.exec("cat /tmp/theirs.txt", user="nobody")
        roots = await sandbox.exec("cat /tmp/roots.txt", user="nobody")
        tool = await sandbox.exec("/tmp/new-folder/tool.sh", user="nobody")

    assert theirs.output == "for nobody\n"
    assert roots.exit_code == 1
    assert "Permission denied" in roots.output
    assert tool.output == "tool\n"  # the folder made on the way is open to others


async def test_a_missing_path_is_a_sandbox_error(backend: BackendUnderTest, tmp_path: Path) -> None:
    async with backend.sandbox() as sandbox:
        with pytest.raises(SandboxError):
            await sandbox.download("/no/such/path", tmp_path, file_cap=1024)
        with pytest.raises(SandboxError):
            await sandbox.upload(tar_of_files({"x.txt": b"x"}), "/no/such/folder")
