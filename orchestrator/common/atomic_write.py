"""Files written whole or not at all: every result and job file goes through here.

The text goes to a temporary file beside the target (`.NAME.PID.tmp`), is flushed to disk,
then replaces the target in one rename. A reader, a `--resume` or a report never sees half a
file, a process killed while writing leaves the old file (or none), and a write that fails
(a full disk) leaves no temporary behind.

`write_atomic` (off the loop) and `write_atomic_sync` are the two entry points.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.common.offload import run_blocking


def write_atomic_sync(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace `path` with `text`, whole or not at all (see the module's docstring);
    `durable=False` skips the flush to disk, for a record a power cut may lose (the rename
    is still whole or nothing)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


async def write_atomic(path: Path, text: str) -> None:
    """`write_atomic_sync` off the event loop."""
    await run_blocking(write_atomic_sync, path, text)
