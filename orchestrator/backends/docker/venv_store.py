"""The runtime venv as a read-only mount: what a task image gets when its engine is local.

A venv copied into every image costs every build a step of its own and ties every tag to the
runtime's wheel. When the engine runs on this host, a folder of this host can be bind-mounted
into its containers instead: the task's image is then its own build, with nothing of
trialbox's in it, and each sandbox gets the venv mounted read-only at VENV_DIR when it is
created. A read-only bind mount refuses every write, root's too, so the agent cannot change
the runtime the gateway's forwarder and graders run.

The store (`store_root()`, under the host's cache) holds one venv folder per CPython (its
version and its interpreter's path) and runtime wheel, named by a hash of them: made once
per engine host and shared by every image and sandbox with that CPython. A folder holds what
the one-COPY layer would put in the image (`venv_layer.venv_files`: `pyvenv.cfg`, `bin/python`
linking to the image's own interpreter, site-packages), plus bytecode compiled once by that
very interpreter, in a throwaway container of an image that has it: no process can write
bytecode into a read-only venv, and without it each start of the runtime compiles pydantic
again (about a second here). A folder is made in a staging folder beside it and renamed into
place, so a process never sees half of one; two processes that make one at once keep the
first.

`engine_sees_store_blocking` asks the engine (the builder does, once) whether it sees this
host's store: a local socket can be another machine's engine's, mounted into a container;
`venv_folder_blocking` makes or finds a folder.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

import docker.errors
from docker.types import Mount as DockerMount

from container_runtime.paths import VENV_DIR
from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.runtime_wheel import runtime_wheel
from orchestrator.backends.docker.venv_layer import CONTEXT_DIR, LINK_MODE, venv_files
from orchestrator.common.wheelhouse import cache_dir
from orchestrator.sandbox.image_facts import ImagePython

log = logging.getLogger(__name__)

COMPILE_TIMEOUT_SEC = 300  # compileall of pydantic: seconds here
SELINUX_ENFORCE = Path("/sys/fs/selinux/enforce")
_NO_SUCH_IMAGE = "trialbox-no-such-image:0"


def store_root() -> Path:
    """The folder of this host's venvs (`TRIALBOX_CACHE_DIR` moves it with the cache)."""
    return cache_dir() / "venvs"


@functools.cache
def _wheel_digest() -> str:
    return hashlib.sha256(runtime_wheel()[1]).hexdigest()


def venv_key(python: ImagePython, arch: str) -> str:
    """The name of the venv folder for this CPython on `arch`: a hash of the runtime wheel,
    the machine and the interpreter (its version and path), so a changed runtime or another
    interpreter gets a folder of its own and a folder never changes once made."""
    text = f"{_wheel_digest()}\0{arch}\0{python.version}\0{python.path}"
    return f"cp{python.minor}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def engine_sees_store_blocking() -> bool:
    """Whether the engine can bind-mount a folder of this host's store: it is asked to create
    a container with a folder just made here as a mount and an image that does not exist.
    An engine that sees the folder refuses the image (404); one that does not refuses the
    mount first (400, "bind source path does not exist"). Nothing is created either way. A
    host that enforces SELinux is taken not to: its containers read no folder of it that was
    not labelled for them (trialbox labels none)."""
    try:
        if SELINUX_ENFORCE.read_text().strip() == "1":
            return False
    except OSError:
        pass
    root = store_root()
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".seen-", dir=root))
    api = docker_api.docker_client().api
    try:
        config = api.create_host_config(
            mounts=[DockerMount("/trialbox-seen", str(folder), type="bind", read_only=True)]
        )
        try:
            created = api.create_container(
                _NO_SUCH_IMAGE, ["true"], host_config=config, network_disabled=True
            )
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as exc:
            if "bind source path" in str(exc):
                return False
            raise
        api.remove_container(created["Id"], force=True)  # an engine that had such an image
        return True
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def venv_folder_blocking(python: ImagePython, arch: str, image: str) -> Path:
    """The store's venv folder for `python`, made when missing; `image` (an id) is an image
    that has that interpreter, run once to compile the bytecode. Raises RuntimeError when the
    runtime cannot be installed for that CPython (e.g. one too new for the wheelhouse)."""
    target = store_root() / venv_key(python, arch)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".venv-", dir=target.parent))
    try:
        _write_venv(staging, python, arch)
        _compile(staging, python, image)
        _readable_by_all(staging)
        try:
            staging.rename(target)
        except OSError:  # another process made it first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_venv(folder: Path, python: ImagePython, arch: str) -> None:
    """The files the one-COPY layer would copy, written under `folder`."""
    for name, (data, mode) in venv_files(python, arch).items():
        path = folder / name.removeprefix(f"{CONTEXT_DIR}/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if mode == LINK_MODE:
            path.symlink_to(data.decode())
        else:
            path.write_bytes(data)
            path.chmod(mode)


def _compile(folder: Path, python: ImagePython, image: str) -> None:
    """Compile the venv's site-packages with the image's own interpreter, mounted where the
    sandboxes see it (bytecode names its source's path), as this process's user (the files
    stay ours to remove). Best effort: without bytecode the venv works, only slower."""
    client = docker_api.docker_client()
    site = f"{VENV_DIR}/lib/python{python.minor}/site-packages"
    try:
        container = client.containers.create(
            image, [python.path, "-I", "-m", "compileall", "-q", site], entrypoint=[],
            network_mode="none", user=f"{os.getuid()}:{os.getgid()}", labels={},
            mounts=[DockerMount(VENV_DIR, str(folder), type="bind", read_only=False)],
        )  # fmt: skip
    except docker.errors.DockerException as exc:
        log.warning("the runtime venv's bytecode could not be compiled: %s", exc)
        return
    try:
        container.start()
        status = container.wait(timeout=COMPILE_TIMEOUT_SEC)["StatusCode"]
        if status != 0:
            said = container.logs().decode(errors="replace").strip()[-500:]
            log.warning("compiling the runtime venv's bytecode exited %s: %s", status, said)
    except Exception as exc:  # the venv is whole without its bytecode
        log.warning("the runtime venv's bytecode could not be compiled: %s", exc)
    finally:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            log.warning(
                "the container that compiled the runtime venv could not be removed: %s", exc
            )


def _readable_by_all(folder: Path) -> None:
    """Every user of a sandbox reads the venv: folders 0755, files 0644 (0755 executable)."""
    for path in [folder, *folder.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        wanted = 0o755 if stat.S_ISDIR(mode) or mode & 0o111 else 0o644
        if stat.S_IMODE(mode) != wanted:
            path.chmod(wanted)
