"""The host's packaging tools: the static `uv` that the runtime wheelhouse ships, and pip.

Both run on the host only; containers never reach a package index. `uv` is the same binary the
runtime layer uses (`common/wheelhouse.py`), so nothing else needs installing.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from orchestrator.common.wheelhouse import ensure_wheelhouse

TOOL_TIMEOUT_SEC = 600.0  # a build or a download of many wheels on a slow link: minutes at most


def host_arch() -> str:
    """The host's machine name as wheel platform tags spell it (x86_64, aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def uv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the wheelhouse's `uv` (never downloading a Python); its output is captured."""
    binary = ensure_wheelhouse(host_arch()) / "uv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, check=False, cwd=cwd, env=env,
        timeout=TOOL_TIMEOUT_SEC,
    )  # fmt: skip


def pip_download(*args: str) -> subprocess.CompletedProcess[str]:
    """`pip download --only-binary=:all:` with the host's pip: wheels for another Python and
    platform (`--python-version`, `--platform`), never an sdist that would need building."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", *args]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return subprocess.run(
        command, capture_output=True, text=True, check=False, env=env, timeout=TOOL_TIMEOUT_SEC
    )


def tail(text: str, limit: int = 2000) -> str:
    """The end of a tool's output, where its error is."""
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
