"""The host-prepared wheelhouse that the runtime layer installs from, offline.

Containers cannot reach PyPI (nor verify TLS to it), so the host downloads, once, a static
`uv` binary (shipped inside the musllinux `uv` wheel) and pydantic's wheels for every CPython
an image might carry; uv picks the matching ones at build time. `container_runtime` itself is
packed into a small wheel here, deterministically, so its bytes (and the image tags that
depend on them) change only when its source does.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import container_runtime

UV_VERSION = "0.13.9"
PYDANTIC_SPEC = "pydantic>=2.7,<3"
IMAGE_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
RUNTIME_DIST = "trialbox_container_runtime"
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


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


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def runtime_wheel() -> tuple[str, bytes]:
    """`container_runtime` as a pure-Python wheel (file name, bytes), with fixed timestamps.

    Built in memory: nothing shared is written, so concurrent processes cannot see half a file.
    """
    version = container_runtime.__version__
    source = Path(container_runtime.__file__).parent
    dist_info = f"{RUNTIME_DIST}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted(source.rglob("*.py")):
        files[f"container_runtime/{path.relative_to(source).as_posix()}"] = path.read_bytes()
    files[f"{dist_info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {RUNTIME_DIST.replace('_', '-')}\n"
        f"Version: {version}\n"
        f"Requires-Python: >={'.'.join(map(str, container_runtime.MIN_PYTHON))}\n"
        "Requires-Dist: pydantic>=2,<3\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: trialbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return f"{RUNTIME_DIST}-{version}-py3-none-any.whl", buffer.getvalue()
