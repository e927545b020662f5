"""Archive extraction on a full host disk (issue 18 item 5): engine-free, ENOSPC simulated."""

import errno
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.common import archive


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_an_extraction_cut_by_a_full_disk_frees_the_file_it_was_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = Path.open

    def full_disk_open(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(self, mode, *args, **kwargs)
        if self.name == "big.log" and "w" in mode:
            handle.write(b"partial")

            def refuse(_data: bytes) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(handle, "write", refuse)
        return handle

    monkeypatch.setattr(Path, "open", full_disk_open)
    data = _tar({"agent/small.txt": b"ok", "agent/big.log": b"x" * 4096})
    with pytest.raises(OSError) as raised:
        archive.extract_stream([data], tmp_path, file_cap=1 << 20)
    assert raised.value.errno == errno.ENOSPC
    assert (tmp_path / "agent/small.txt").read_bytes() == b"ok"
    assert not (tmp_path / "agent/big.log").exists()
