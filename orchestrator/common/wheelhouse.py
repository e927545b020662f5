"""The host's packaging tools, downloaded once: a static `uv` and pydantic's wheels.

Containers cannot reach a package index (nor verify TLS to one), so the host downloads, once,
a static `uv` binary (shipped inside the musllinux `uv` wheel) and pydantic's wheels for every
CPython an image might carry. The Docker backend's runtime layer installs from them offline;
bundles build and install with the same `uv` on the host. Nothing here knows an engine.

`ensure_wheelhouse` fetches them under `cache_dir()` (`TRIALBOX_CACHE_DIR`, else
`~/.cache/trialbox`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

UV_VERSION = "0.13.9"
PYDANTIC_SPEC = "pydantic>=2.7,<3"
IMAGE_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")


def cache_dir() -> Path:
    """Where downloads are kept between runs (`TRIALBOX_CACHE_DIR` overrides)."""
    root = os.environ.get("TRIALBOX_CACHE_DIR") or Path.home() / ".cache" / "trialbox"
    return Path(root)


def _pip_download(dest: Path, *args: str) -> None:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
    completed = subprocess.run(
        [*command, "-d", str(dest), *args], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"pip download {' '.join(args)} failed: {completed.stderr.strip()[-2000:]}"
        )


def _manylinux(arch: str) -> list[str]:
    return ["--platform", f"manylinux2014_{arch}", "--platform", f"manylinux_2_28_{arch}"]


def _download_pydantic(dest: Path, arch: str) -> None:
    def one(version: str) -> str | None:
        try:
            _pip_download(
                dest, "--python-version", version, "--implementation", "cp",
                *_manylinux(arch), PYDANTIC_SPEC,
            )  # fmt: skip
        except RuntimeError as exc:
            return f"CPython {version}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=len(IMAGE_PYTHONS)) as pool:
        failures = [f for f in pool.map(one, IMAGE_PYTHONS) if f]
    if len(failures) == len(IMAGE_PYTHONS):
        raise RuntimeError("no pydantic wheels could be downloaded:\n" + "\n".join(failures))


def _extract_uv(wheel_dir: Path, dest: Path) -> None:
    wheel = next(wheel_dir.glob("uv-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".data/scripts/uv"))
        with archive.open(member) as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out)
    dest.chmod(0o755)


def ensure_wheelhouse(arch: str = "x86_64") -> Path:
    """A folder holding `uv` and `wheels/` (pydantic for every CPython); downloaded once."""
    home = cache_dir() / f"wheelhouse-{arch}-uv{UV_VERSION}"
    if (home / "complete").exists():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wheelhouse-", dir=home.parent))
    try:
        wheels = staging / "wheels"
        wheels.mkdir()
        uv_wheel = staging / "uv-wheel"
        _pip_download(
            uv_wheel, "--no-deps", "--python-version", "3.11",
            "--platform", f"musllinux_1_1_{arch}", f"uv=={UV_VERSION}",
        )  # fmt: skip
        _extract_uv(uv_wheel, staging / "uv")
        shutil.rmtree(uv_wheel)
        _download_pydantic(wheels, arch)
        (staging / "complete").write_text("ok\n")
        try:
            staging.rename(home)
        except OSError:  # another process finished first; its copy is as good as ours
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return home
