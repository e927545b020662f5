"""The runtime venv mounted read-only from this host's store (a local engine): the image is the
task's own build, its tag the hash of the task's own context; each sandbox mounts the venv for
the image's CPython, which no agent, root included, can write; an image without python3 gets
none; a step that adds a python3 gets the venv for it; an image pulled from a registry gets its
folder made on this host; the store's folder is made once and shared.

Against the real engine, with `ImageBuilder(mount_runtime=True)` (what a local engine gets).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import docker
import pytest

from container_runtime.paths import RUNTIME_CHECK, VENV_DIR
from orchestrator import TrialConfig, load_task, run_trial
from orchestrator.backends.docker import venv_store
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.build import TASK_REPO, with_tag
from orchestrator.backends.docker.images import ImageBuilder
from orchestrator.common.ids import new_id
from orchestrator.sandbox import Sandbox, SandboxSpec
from orchestrator.sandbox.image_facts import ImagePython
from tests.conftest import (
    BASE_IMAGE,
    BASE_IMAGE_MAP,
    OFFICIAL_IMAGE,
    TEST_IMAGE_PREFIX,
    TEST_OWNER,
)

MakeTask = Callable[..., Path]
FLOW = (
    "from container_runtime import AgentWorkflow\n\n"
    "class Flow(AgentWorkflow):\n"
    "    async def run(self, ctx):\n"
    "        import sys\n"
    "        print(sys.prefix, flush=True)\n"
)


def mounting(config: TrialConfig) -> DockerBackend:
    return DockerBackend(config.limits, builder=ImageBuilder(mount_runtime=True))


@contextlib.asynccontextmanager
async def sandbox_of(backend: DockerBackend, image: str) -> AsyncIterator[Sandbox]:
    spec = SandboxSpec(
        image=image, trial_id=new_id("mount"), job_id=new_id("job-mount"), owner=TEST_OWNER
    )
    sandbox = await backend.create_sandbox(spec)
    try:
        yield sandbox
    finally:
        await sandbox.destroy()


def mounts_of(client: docker.DockerClient, sandbox: Sandbox) -> list[dict]:
    return client.api.inspect_container(sandbox.name)["Mounts"]


def digest(folder: Path) -> str:
    """Every name, mode, link target and file byte under `folder`."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(folder)}\0{st.st_mode:o}\0".encode())
        if path.is_symlink():
            h.update(str(path.readlink()).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


async def test_a_local_engine_builds_the_task_s_own_dockerfile_with_no_runtime_in_it(
    config: TrialConfig, make_task: MakeTask, docker_ready: docker.DockerClient
) -> None:
    """Nothing of trialbox's is in the image or its tag: the tag is the hash of the task's own
    context (its Dockerfile, base images mapped), so a change of the runtime rebuilds nothing;
    the sandbox mounts the venv read-only, its interpreter the image's own."""
    marker = uuid.uuid4().hex
    text = f"FROM {OFFICIAL_IMAGE}\nWORKDIR /app\nCOPY data.txt /app/\n"
    task = load_task(make_task("own", dockerfile=text, files={"environment/data.txt": marker}))
    backend = mounting(config)

    built = await backend.ensure_image(task, BASE_IMAGE_MAP)

    own = {"Dockerfile": (text.replace(OFFICIAL_IMAGE, BASE_IMAGE).encode(), 0o644),
           "data.txt": (marker.encode(), 0o644)}  # fmt: skip
    assert built.tag == with_tag(TASK_REPO, own)[0]
    assert (built.status, built.runtime, built.warnings) == ("built", "present", [])
    steps = [step.get("CreatedBy") or "" for step in docker_ready.api.history(built.tag)]
    assert not any("/opt/trialbox" in step or "trialbox-venv" in step for step in steps)
    async with sandbox_of(backend, built.tag) as sandbox:
        (mount,) = mounts_of(docker_ready, sandbox)
        assert (mount["Type"], mount["Destination"], mount["RW"]) == ("bind", VENV_DIR, False)
        assert Path(mount["Source"]).parent == venv_store.store_root()
        ran = await sandbox.exec(
            f"{RUNTIME_CHECK} && {VENV_DIR}/bin/python -c 'import sys; print(sys.prefix)' && "
            f"readlink {VENV_DIR}/bin/python && cat /app/data.txt",
            user="nobody",
        )
        assert (ran.exit_code, ran.output) == (0, f"{VENV_DIR}\n/usr/bin/python3.11\n{marker}")


async def test_the_mounted_runtime_cannot_be_written_by_the_agent(
    config: TrialConfig, make_task: MakeTask, docker_ready: docker.DockerClient
) -> None:
    """Root (the default agent user) and any other user: no new file, no changed file or
    mode, no removal, no unmount or remount; the runtime still starts and the host's folder
    is byte for byte what it was."""
    task = load_task(make_task("written", dockerfile=f"FROM {OFFICIAL_IMAGE}\n"))
    backend = mounting(config)
    built = await backend.ensure_image(task, BASE_IMAGE_MAP)
    mount = await backend.builder.runtime_mount(built.tag)
    assert mount is not None
    source = Path(mount.source)
    before = digest(source)
    site = f"{VENV_DIR}/lib/python3.11/site-packages"
    attempts = {
        "new file": f"touch {VENV_DIR}/planted",
        "append": f"echo 'raise SystemExit(3)' >> {site}/container_runtime/__init__.py",
        "truncate": f": > {site}/container_runtime/__init__.py",
        "remove": f"rm -f {site}/container_runtime/__init__.py",
        "remove all": f"rm -rf {site}",
        "relink": f"ln -sf /bin/false {VENV_DIR}/bin/python",
        "chmod": f"chmod 0777 {VENV_DIR}/pyvenv.cfg",
        "bytecode": f"mkdir {site}/__pycache__/planted",
        "unmount": f"umount {VENV_DIR}",
        "remount": f"mount -o remount,rw {VENV_DIR}",
        "replace": f"mv {VENV_DIR} /tmp/venv",
    }
    async with sandbox_of(backend, built.tag) as sandbox:
        for user in ("root", "nobody"):
            for what, command in attempts.items():
                tried = await sandbox.exec(command + " 2>/dev/null", user=user)
                assert tried.exit_code != 0, (user, what, tried.output)
        checked = await sandbox.exec(f"{RUNTIME_CHECK} && echo ok", user="nobody")
        assert (checked.exit_code, checked.output) == (0, "ok\n")
    assert digest(source) == before


async def test_a_workflow_and_a_grader_run_on_the_mounted_runtime(
    config: TrialConfig, make_task: MakeTask, tmp_path: Path, docker_ready: docker.DockerClient
) -> None:
    """A trial whose agent and verifier both run the runtime, mounted (the agent's output
    names the venv as its interpreter's prefix)."""
    source = tmp_path / "flow.py"
    source.write_text(FLOW)
    test_sh = (
        f"#!/bin/sh\n{RUNTIME_CHECK} && grep -qx {VENV_DIR} /logs/agent/stdout.txt && "
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    task = make_task("workflow", dockerfile=f"FROM {OFFICIAL_IMAGE}\n", test_sh=test_sh)

    result = await run_trial(
        task, f"workflow:{source}:Flow", config=config, backend=mounting(config)
    )

    assert result.error is None, result.error
    assert result.reward == 1.0


async def test_an_image_without_python3_mounts_nothing(
    config: TrialConfig, make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    task = load_task(make_task("bare", dockerfile=f"FROM {no_python}\nWORKDIR /app\n"))
    backend = mounting(config)

    built = await backend.ensure_image(task, {})

    assert built.runtime == "absent"
    assert await backend.builder.runtime_mount(built.tag) is None
    async with sandbox_of(backend, built.tag) as sandbox:
        assert mounts_of(docker_ready, sandbox) == []
        ran = await sandbox.exec("test -e /opt/trialbox || echo none")
        assert ran.output == "none\n"


async def test_a_step_that_adds_a_python3_gets_the_venv_for_it(
    config: TrialConfig, make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    """The base has no python3, a step copies one in: the built image is probed (once) and
    its sandboxes mount a venv for that interpreter, a folder of the store of its own."""
    dockerfile = (
        f"FROM {no_python}\nCOPY --from={BASE_IMAGE} /usr/bin/python3.11 /usr/bin/python3\n"
        f"COPY --from={BASE_IMAGE} /usr/lib/python3.11 /usr/lib/python3.11\n"
        f"RUN echo {uuid.uuid4().hex}\n"
    )
    task = load_task(make_task("added", dockerfile=dockerfile))
    backend = mounting(config)
    plan = await backend.plan_image(task, {})
    assert (plan.mount_runtime, plan.python, plan.runtime) == (True, None, "unknown")

    built = await backend.ensure_image(task, {}, plan=plan)

    assert built.runtime == "present"
    python = backend.builder.mounted(built.tag)
    assert python is not None and python.path == "/usr/bin/python3"
    async with sandbox_of(backend, built.tag) as sandbox:
        ran = await sandbox.exec(f"{RUNTIME_CHECK} && readlink {VENV_DIR}/bin/python")
        assert (ran.exit_code, ran.output) == (0, "/usr/bin/python3\n")


async def test_an_image_pulled_from_a_registry_gets_its_venv_made_on_this_host(
    make_task: MakeTask, docker_ready: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that pulls an image another node built (its tag the same content hash) makes
    the venv folder on its own host, as it would for an image it built."""
    task = load_task(make_task("pulled", dockerfile=f"FROM {OFFICIAL_IMAGE}\nWORKDIR /srv\n"))
    built = await ImageBuilder(mount_runtime=True).ensure_image(task, BASE_IMAGE_MAP)
    image_id = docker_ready.images.get(built.tag).id
    # The image stays under a test's tag (as in the registry) while its task tag goes.
    docker_ready.api.tag(image_id, f"{TEST_IMAGE_PREFIX}pulled", uuid.uuid4().hex[:12])
    docker_ready.images.remove(built.tag)

    class Registry:
        async def pull(self, tag: str) -> bool:
            repository, _, name = tag.rpartition(":")
            docker_ready.api.tag(image_id, repository, name)
            return True

    made: list[str] = []
    real = venv_store.venv_folder_blocking

    def counting(python: ImagePython, arch: str, image: str) -> Path:
        made.append(image)
        return real(python, arch, image)

    monkeypatch.setattr("orchestrator.backends.docker.images.venv_folder_blocking", counting)
    node = ImageBuilder(Registry(), mount_runtime=True)  # type: ignore[arg-type]

    pulled = await node.ensure_image(task, BASE_IMAGE_MAP)

    assert (pulled.tag, pulled.status, pulled.runtime) == (built.tag, "cached", "present")
    assert len(made) == 1
    assert await node.runtime_mount(pulled.tag) is not None


async def test_the_store_makes_a_folder_once_for_every_image_of_one_python(
    make_task: MakeTask,
    docker_ready: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Images of one CPython share one folder; one removed from the store is made again at
    the next sandbox, compiled once. (A store of this test's own, so that the count is.)"""
    tasks = [
        load_task(make_task(f"shared-{i}", dockerfile=f"FROM {OFFICIAL_IMAGE}\nENV N={i}\n"))
        for i in range(2)
    ]
    builder = ImageBuilder(mount_runtime=True)
    compiled: list[Path] = []
    real = venv_store._compile

    def counting(folder: Path, python: ImagePython, image: str) -> None:
        compiled.append(folder)
        real(folder, python, image)

    monkeypatch.setattr(venv_store, "_compile", counting)
    monkeypatch.setattr(venv_store, "store_root", lambda: tmp_path / "venvs")
    root = venv_store.store_root()
    try:
        built = await asyncio.gather(*(builder.ensure_image(t, BASE_IMAGE_MAP) for t in tasks))
        mounts = [await builder.runtime_mount(b.tag) for b in built]
        assert len({m.source for m in mounts if m is not None}) == 1 and None not in mounts
        assert len(compiled) == 1
        folder = Path(mounts[0].source)  # type: ignore[union-attr]
        assert list(folder.rglob("*.cpython-311.pyc"))  # compiled by the image's python3.11

        venv_store.shutil.rmtree(folder)
        again = await builder.runtime_mount(built[0].tag)
        assert again is not None and Path(again.source) == folder and folder.is_dir()
        assert len(compiled) == 2
    finally:
        venv_store.shutil.rmtree(root, ignore_errors=True)


async def test_a_local_engine_sees_this_host_s_store(docker_ready: docker.DockerClient) -> None:
    """Asked once per builder; the check creates nothing and leaves no folder behind."""
    assert await asyncio.to_thread(venv_store.engine_sees_store_blocking) is True
    assert await ImageBuilder().mounts_runtime() is True
    left = [p for p in venv_store.store_root().iterdir() if p.name.startswith(".seen-")]
    assert left == []  # (another session's check may be under way: milliseconds)
