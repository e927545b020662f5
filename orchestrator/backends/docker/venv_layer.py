"""The runtime venv's files for an image's CPython, and the one small COPY that puts them in
an image where they cannot be mounted (a remote engine; `venv_store.py` mounts them).

The general runtime layer copies `uv` and wheels for every CPython into the image and builds
the venv there: 58 MB of layers and a RUN step, several seconds per image on a slow storage
driver. When the final stage's base image is local and has a CPython >= 3.9, its path and
version are learnt once on the host (`probe`), the matching site-packages are installed on
the host by `uv pip install --target` for that version (cached), and the venv is a few files:
`pyvenv.cfg`, `bin/python` (a symlink to the image's own interpreter) and
`lib/pythonX.Y/site-packages`. No network, no RUN, about 8 MB: the store's folder on a local
engine, build-context files with one COPY elsewhere.

The probe's answer is remembered on disk per image id; `runtime_site` is the host folder for a
CPython, `venv_files` and `copy_block` the context and the COPY. `DockerImageFacts` are the
`ImageFacts` a bundle's dependencies are resolved with.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import stat
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import docker.errors

from container_runtime.paths import VENV_DIR
from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.runtime_wheel import runtime_wheel
from orchestrator.common.archive import read_files
from orchestrator.common.wheelhouse import cache_dir, ensure_wheelhouse
from orchestrator.sandbox.image_facts import ImagePython

CONTEXT_DIR = "trialbox-venv"
PROBE_TIMEOUT_SEC = 60  # the probe runs `python3 -c print`: seconds at most
LINK_MODE = stat.S_IFLNK | 0o777  # a context entry with this mode is a symlink to its bytes
_PROBE = (
    'p="$(command -v python3)" && r="$(readlink -f "$p")" && echo "$r" && '
    '"$r" -c "import sys; print(\'%d.%d.%d\' % sys.version_info[:3])"'
)


@dataclass(frozen=True)
class DockerImageFacts:
    """`ImageFacts` of an image the Docker backend probed: what a bundle's dependencies are
    resolved for and against."""

    python: ImagePython
    arch: str

    def runtime_site(self) -> Path:
        return runtime_site(self.python.minor, self.arch)


def _probe_cache(image_id: str) -> Path:
    # An image id is a hash of its content: what it holds never changes, so neither does the
    # answer, across processes too.
    return cache_dir() / "probes" / image_id.replace(":", "-")


def probe_blocking(image: str) -> ImagePython | None:
    """The python3 of the image with this id, by running it once ever on this host (None:
    no sh or no python3 in it; also remembered). When the engine could not tell (the image
    is not local, the engine failed), its error is raised and nothing is remembered."""
    cached = _probe_cache(image)
    try:
        known = cached.read_text().split()
    except OSError:
        known = None
    if known is not None:
        return ImagePython(path=known[0], version=known[1]) if len(known) == 2 else None
    found = _probe_blocking(image)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{uuid.uuid4().hex}")
    partial.write_text("" if found is None else f"{found.path} {found.version}\n")
    partial.replace(cached)
    return found


# How the engine words a start whose command is not in the image (no `sh`): the image's own
# answer, not a failure of the engine (and so remembered).
_NO_SHELL = '"sh": executable file not found'


def _probe_blocking(image: str) -> ImagePython | None:
    """Run the probe in a throwaway container (no network), removed whatever happens."""
    client = docker_api.docker_client()
    container = client.containers.create(
        image, ["sh", "-c", _PROBE], entrypoint=[], network_mode="none", labels={},
    )  # fmt: skip
    try:
        try:
            container.start()
        except docker.errors.APIError as exc:
            if _NO_SHELL in str(exc):
                return None
            raise
        if container.wait(timeout=PROBE_TIMEOUT_SEC)["StatusCode"] != 0:  # no python3
            return None
        output = container.logs(stdout=True, stderr=False)
    finally:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
    lines = output.decode(errors="replace").split()
    if len(lines) != 2 or not lines[0].startswith("/"):
        return None
    return ImagePython(path=lines[0], version=lines[1])


def runtime_site(minor: str, arch: str) -> Path:
    """The host folder holding container_runtime and its dependencies installed for CPython
    `minor` (made once, then kept): what the venv's site-packages holds. A bundle's
    dependencies are resolved against the versions found here, so both agree."""
    home = ensure_wheelhouse(arch)
    name, wheel = runtime_wheel()
    target = cache_dir() / f"site-{arch}-cp{minor}-{_wheel_key(wheel)}"
    if not (target / ".complete").exists():
        _install(home, name, wheel, minor, arch, target)
    return target


@functools.cache
def _site_packages(minor: str, arch: str) -> dict[str, tuple[bytes, int]]:
    """container_runtime and its dependencies for CPython `minor`, installed on the host."""
    return read_files(runtime_site(minor, arch))


def _wheel_key(wheel: bytes) -> str:
    return hashlib.sha256(wheel).hexdigest()[:16]


def _install(home: Path, name: str, wheel: bytes, minor: str, arch: str, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".site-", dir=cache_dir()))
    try:
        (staging / "wheels").mkdir()
        (staging / "wheels" / name).write_bytes(wheel)
        site = staging / "site"
        completed = subprocess.run(
            [
                str(home / "uv"), "pip", "install", "--quiet", "--no-cache", "--no-index",
                "--target", str(site), "--python-version", minor,
                "--python-platform", f"{arch}-manylinux_2_17",
                "--find-links", str(home / "wheels"), "--find-links", str(staging / "wheels"),
                "trialbox-container-runtime",
            ],
            capture_output=True, text=True, check=False,
            env={"UV_PYTHON_DOWNLOADS": "never", "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        if completed.returncode != 0:
            raise RuntimeError(f"uv could not install the runtime for CPython {minor}: "
                               f"{completed.stderr.strip()[-1000:]}")  # fmt: skip
        (site / ".complete").write_text("ok\n")
        try:
            site.rename(target)
        except OSError:  # another process finished first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def venv_files(python: ImagePython, arch: str) -> dict[str, tuple[bytes, int]]:
    """Build-context entries (under CONTEXT_DIR) that make a venv for this interpreter."""
    home = PurePosixPath(python.path).parent
    cfg = (
        f"home = {home}\ninclude-system-site-packages = false\nversion = {python.version}\n"
    ).encode()
    files = {
        f"{CONTEXT_DIR}/pyvenv.cfg": (cfg, 0o644),
        f"{CONTEXT_DIR}/bin/python": (python.path.encode(), LINK_MODE),
        f"{CONTEXT_DIR}/bin/python3": (b"python", LINK_MODE),
    }
    prefix = f"{CONTEXT_DIR}/lib/python{python.minor}/site-packages"
    for name, entry in _site_packages(python.minor, arch).items():
        files[f"{prefix}/{name}"] = entry
    return files


def copy_block() -> str:
    """The whole runtime layer on this path: one COPY (root-owned, whatever USER is)."""
    return (
        "\n# --- trialbox runtime layer (appended by trialbox) ---\n"
        f"COPY {CONTEXT_DIR} {VENV_DIR}\n"
    )
