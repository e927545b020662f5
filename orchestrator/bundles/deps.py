"""A bundle's dependencies for one image's CPython, resolved and installed on the host.

Containers never reach a package index, so the host does the network part: `pip download`
fetches wheels for the image's Python version and platform (never an sdist, which would need
a compiler for the wrong machine) into a local wheelhouse; `uv pip install --no-index` then
installs them from there, offline, into a folder for that CPython. What the runtime venv
already holds (pydantic, container_runtime) is pinned during resolution, so both agree, and
left out of the result, which is exactly what a bundle adds to the venv's site-packages.

Results are kept under the cache by the requirements, the CPython, the platform and those
pins: the same dependency set is resolved once per host, and gives the same files (and so
the same image tag) every time.

`dependency_site` returns that folder for a set of requirements.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from orchestrator.bundles.errors import DependencyDownloadError, DependencyError
from orchestrator.bundles.tools import pip_download, tail, uv
from orchestrator.common.wheelhouse import cache_dir

_DIST_INFO = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)\.dist-info$")
_NOT_FOUND = re.compile(r"No matching distribution found for (?P<req>\S+)")
# How pip words an index it could not reach: the host's trouble, not the bundle's.
_NETWORK = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name",
            "Connection refused", "timed out", "ProxyError", "SSLError")  # fmt: skip
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
_unresolvable: dict[str, DependencyError] = {}  # by key: said once, not asked again per trial


def runtime_pins(site: Path) -> list[str]:
    """`name==version` of every distribution in the runtime's site-packages."""
    pins = []
    for entry in sorted(site.iterdir()):
        match = _DIST_INFO.match(entry.name)
        if match and entry.is_dir():
            pins.append(f"{match['name']}=={match['version']}")
    return pins


def _manylinux(arch: str) -> list[str]:
    # Wheels built for glibc 2.17 to 2.28: what images of the last years (Debian 10+,
    # Ubuntu 20.04+, RHEL 8+) load. Pure-Python wheels match any platform.
    return ["--platform", f"manylinux2014_{arch}", "--platform", f"manylinux_2_28_{arch}"]


def _explain(stderr: str, requirements: Sequence[str], minor: str, arch: str) -> Exception:
    """pip's failure as an error that names the package and the Python version."""
    if any(word in stderr for word in _NETWORK):
        return DependencyDownloadError(
            f"downloading the bundle's dependencies ({', '.join(requirements)}) failed: the "
            f"package index did not answer from this host: {tail(stderr, 600)}"
        )
    missing = _NOT_FOUND.search(stderr)
    if missing is not None:
        return DependencyError(
            f"the bundle's dependency {missing['req']} has no wheel for CPython {minor} on "
            f"{arch} Linux (manylinux): no version satisfies it there. Require a version that "
            f"publishes wheels for Python {minor}, or run the bundle on an image with a Python "
            "it supports"
        )
    return DependencyError(
        f"the bundle's dependencies ({', '.join(requirements)}) cannot be resolved for "
        f"CPython {minor} on {arch} Linux: {tail(stderr, 1500)}"
    )


def _download(requirements: Sequence[str], pins: Path, minor: str, arch: str, into: Path) -> None:
    done = pip_download(
        "--python-version", minor, "--implementation", "cp", *_manylinux(arch),
        "--constraint", str(pins), "--dest", str(into), *requirements,
    )  # fmt: skip
    if done.returncode != 0:
        raise _explain(done.stderr, requirements, minor, arch)


def _install(requirements: Sequence[str], pins: Path, minor: str, arch: str, wheels: Path,
             site: Path) -> None:  # fmt: skip
    done = uv(
        "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels),
        "--target", str(site), "--python-version", minor,
        "--python-platform", f"{arch}-manylinux_2_28", "--constraint", str(pins), *requirements,
    )  # fmt: skip
    if done.returncode != 0:
        raise DependencyError(
            f"the bundle's dependencies ({', '.join(requirements)}) downloaded for CPython "
            f"{minor} could not be installed from them: {tail(done.stderr)}"
        )


def _keep_only_additions(site: Path, runtime: Path) -> None:
    """Remove what the runtime venv has already (same pinned versions, same files) and the
    dependencies' scripts (their first line names the host's Python)."""
    for entry in list(site.iterdir()):
        if entry.name == "bin" or (runtime / entry.name).exists():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def _lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def dependency_site(requirements: Sequence[str], minor: str, arch: str, runtime: Path) -> Path:
    """A folder holding what `requirements` add to the runtime venv of a CPython `minor`
    image on `arch`, whose site-packages `runtime` holds (`ImageFacts.runtime_site`):
    resolved and downloaded once (network, on the host), installed offline.

    Raises `DependencyError` when a requirement has no wheel for that Python (naming it and
    the version), `DependencyDownloadError` when the index cannot be reached.
    """
    pins = runtime_pins(runtime)
    key = hashlib.sha256(json.dumps([sorted(requirements), minor, arch, pins]).encode()).hexdigest()
    home = cache_dir() / "bundle-deps" / f"{arch}-cp{minor}-{key[:20]}"
    with _lock(key):  # threads of this process wait for one resolution; processes race safely
        if (home / ".complete").exists():
            return home / "site"
        if key in _unresolvable:
            raise _unresolvable[key]
        home.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".deps-", dir=home.parent))
        try:
            constraints = staging / "runtime-pins.txt"
            constraints.write_text("".join(f"{pin}\n" for pin in pins))
            wheels, site = staging / "wheels", staging / "site"
            try:
                _download(requirements, constraints, minor, arch, wheels)
                _install(requirements, constraints, minor, arch, wheels, site)
            except DependencyError as exc:
                _unresolvable[key] = exc
                raise
            _keep_only_additions(site, runtime)
            (staging / "requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
            (staging / ".complete").write_text("ok\n")
            try:
                staging.rename(home)
            except OSError:  # another process finished first; its copy is as good as ours
                pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return home / "site"
