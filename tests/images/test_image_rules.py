"""Image rules that need no engine: which stages could add a python3, the general layer never
failing, how a failed pull is classified, `force_build` without a Dockerfile, the fake
backend's image contract (runtime, warnings, the two ways' tags), and the runtime venv mounted
from this host's store (who mounts it, its folders, a bundle's image over it)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from orchestrator import TaskError, load_task
from orchestrator.backends.docker import venv_store
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.build import BuildPlan
from orchestrator.backends.docker.dockerfile import (
    final_stage_base,
    final_stage_image,
    final_stage_may_add_python,
    runtime_block,
)
from orchestrator.backends.docker.images import ImageBuilder
from orchestrator.backends.docker.pulls import _PullFailed
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.backends.docker.venv_extra import extra_context
from orchestrator.backends.docker.venv_layer import LINK_MODE
from orchestrator.backends.docker.venv_store import venv_key
from orchestrator.backends.fake import FakeBackend
from orchestrator.sandbox import Capabilities, ImageOutcome, SandboxSpec
from orchestrator.sandbox.image_facts import ImagePython
from orchestrator.sandbox.spec import Mount
from tests.conftest import write_task

TOOLS = "trialbox-tools:0123456789abcdef0123"


def test_the_final_stage_base_is_found_whatever_user_a_stage_sets() -> None:
    text = "FROM ubuntu:24.04 AS base\nUSER app\nFROM base AS mid\nWORKDIR /w\nFROM mid\n"
    assert final_stage_base(text) == "ubuntu:24.04"
    assert final_stage_image(text) is None  # the user is inherited: no image to ask
    assert final_stage_base("FROM --platform=linux/amd64 debian AS x\nFROM alpine\n") == "alpine"
    assert final_stage_base("# no stage\n") is None


@pytest.mark.parametrize(
    ("steps", "may_add"),
    [
        ('WORKDIR /app\nCOPY . /app\nENV A=1\nUSER nobody\nCMD ["sh"]\n', False),
        ("RUN apt-get install -y python3\n", True),
        ("ADD python.tar.gz /opt/\n", True),
        ("COPY --from=builder /usr/local /usr/local\n", True),
        ("COPY --chown=1:1 --from=python:3.12 /usr/local /usr/local\n", True),
        ("# RUN in a comment\nCOPY run.sh /\n", False),
    ],
)
def test_which_steps_could_add_a_python3(steps: str, may_add: bool) -> None:
    assert final_stage_may_add_python(f"FROM ubuntu:24.04\n{steps}") is may_add


def test_only_the_final_stage_and_its_parents_count() -> None:
    builder = "FROM ubuntu:24.04 AS builder\nRUN make\n"
    assert not final_stage_may_add_python(builder + "FROM ubuntu:24.04\nWORKDIR /app\n")
    assert final_stage_may_add_python(builder + "FROM builder\nWORKDIR /app\n")


def test_the_general_layer_never_exits_non_zero_for_python() -> None:
    block = runtime_block(TOOLS, None)
    run = block[block.index("RUN ") :]
    assert "exit 1" not in run and "set -e" not in run
    assert "the runtime venv (CPython >= 3.9) is skipped" in run
    assert "is not CPython >= 3.9; the runtime venv is skipped" in run
    assert "could not be installed for $py; it is skipped" in run


@pytest.mark.parametrize(
    ("reason", "refused"),
    [
        (
            'Get "https://registry.example.test/v2/": dial tcp: lookup registry.example.test on '
            "10.0.0.1:53: no such host",
            False,
        ),
        ('Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused', False),
        ("no answer within 300 s", False),
        ("toomanyrequests: You have reached your pull rate limit", False),
        ("manifest for ubuntu:99.99 not found: manifest unknown: manifest unknown", True),
        (
            "pull access denied for nope/nope, repository does not exist or may require "
            "'docker login': denied: requested access to the resource is denied",
            True,
        ),
        ("invalid reference format: repository name must be lowercase", True),
    ],
)
def test_a_failed_pull_is_the_task_s_fault_only_when_the_registry_refused(
    reason: str, refused: bool, tmp_path: Path
) -> None:
    failed = _PullFailed(reason)
    task = load_task(
        write_task(tmp_path, dockerfile=None, task_toml='[environment]\ndocker_image = "x:1"\n')
    )
    error = failed.error(task, "x:1", "x:1")
    assert failed.refused is refused
    assert error.category == ("validation" if refused else "infra")
    assert f"({reason})" in str(error) and "--base-image x:1=LOCAL" in str(error)


async def test_force_build_without_a_dockerfile_is_a_task_error_naming_it(
    tmp_path: Path,
) -> None:
    task = load_task(
        write_task(tmp_path, dockerfile=None, task_toml='[environment]\ndocker_image = "x:1"\n')
    )
    expected = re.escape(f"{task.dockerfile}: missing; --force-build")
    for backend_plan in (ImageBuilder().plan, FakeBackend().plan_image):
        with pytest.raises(TaskError, match=expected) as caught:
            await backend_plan(task, {}, force_build=True)
        assert caught.value.category == "validation"


def test_an_outcome_keeps_its_fields_and_defaults_to_an_unknown_runtime() -> None:
    outcome = ImageOutcome(tag="t", status="built", seconds=1.0)
    assert (outcome.runtime, outcome.warnings) == ("unknown", [])


# -- the fake backend ---------------------------------------------------------------------


async def test_the_fake_reports_a_runtime_a_test_may_set(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "t"))
    backend = FakeBackend()
    built = await backend.ensure_image(task)
    assert (built.status, built.runtime, built.warnings) == ("built", "present", [])

    backend.runtime = "absent"
    backend.image_warnings = ("docker_image x could not be pulled (no); built it instead",)
    cached = await backend.ensure_image(task)
    assert (cached.status, cached.runtime) == ("cached", "absent")
    assert cached.warnings == list(backend.image_warnings)
    assert (await FakeBackend(runtime="unknown").ensure_image(task)).runtime == "unknown"


async def test_the_fake_gives_the_two_ways_two_tags(tmp_path: Path) -> None:
    both = load_task(
        write_task(
            tmp_path,
            "both",
            dockerfile="FROM x:1\nWORKDIR /app\nUSER nobody\n",
            task_toml='[environment]\ndocker_image = "x:1"\n',
        )
    )
    only_dockerfile = load_task(
        write_task(tmp_path, "only", dockerfile="FROM x:1\nWORKDIR /app\nUSER nobody\n")
    )
    backend = FakeBackend()

    as_is = await backend.plan_image(both, {})
    forced = await backend.plan_image(both, {}, force_build=True)

    assert as_is.tag != forced.tag
    assert (as_is.workdir, as_is.user) == ("/", "")  # the prebuilt image's defaults
    assert (forced.workdir, forced.user) == ("/app", "nobody")
    # force_build changes nothing for a task without docker_image.
    assert (await backend.plan_image(only_dockerfile, {}, force_build=True)).tag == forced.tag
    outcome = await backend.ensure_image(both, force_build=True)
    assert outcome.tag == forced.tag


# -- the runtime venv mounted from this host's store (no engine) ----------------------------


def _python(version: str = "3.11.2", path: str = "/usr/bin/python3.11") -> ImagePython:
    return ImagePython(path=path, version=version)


async def test_a_remote_engine_gets_the_venv_in_its_images(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bind mount names a path on the engine's host: a remote engine's sandboxes cannot
    mount this host's store, so its images get the venv in them (asked of no engine)."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://192.0.2.1:2376")
    assert await ImageBuilder().mounts_runtime() is False
    assert await ImageBuilder(mount_runtime=True).mounts_runtime() is True


def test_a_mounted_plan_knows_its_python_or_finds_it_once_built() -> None:
    plan = BuildPlan(tag="trialbox-env:x", timeout_sec=1, context={})
    known = ImageBuilder.mount_plan(plan, _python(), "sha256:base")
    later = ImageBuilder.mount_plan(plan, None, "sha256:base")
    assert (known.mount_runtime, known.python, known.probed_in, known.runtime) == (
        True, _python(), "sha256:base", "present",
    )  # fmt: skip
    assert (later.mount_runtime, later.python, later.probed_in, later.runtime) == (
        True, None, None, "unknown",
    )  # fmt: skip
    assert known.tag == later.tag == plan.tag  # the venv is no part of the image


def test_a_venv_folder_is_named_by_the_runtime_the_machine_and_the_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = venv_key(_python(), "x86_64")
    assert key.startswith("cp3.11-") and venv_key(_python(), "x86_64") == key
    others = {
        venv_key(_python("3.11.9"), "x86_64"),
        venv_key(_python(path="/usr/local/bin/python3.11"), "x86_64"),
        venv_key(_python(), "aarch64"),
    }
    assert key not in others and len(others) == 3
    monkeypatch.setattr(venv_store, "_wheel_digest", lambda: "another runtime")
    assert venv_key(_python(), "x86_64") != key


def test_a_store_folder_holds_the_copy_layer_s_venv_readable_by_every_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the one-COPY layer copies (links to the image's interpreter, site-packages),
    every folder 0755 and file 0644 (0755 executable) whatever the umask; made once, then
    found. (The layer's files stand in for the site-packages the host installs.)"""
    compiled: list[Path] = []
    python = _python()
    site = "trialbox-venv/lib/python3.11/site-packages"
    layer = {
        "trialbox-venv/pyvenv.cfg": (b"home = /usr/bin\nversion = 3.11.2\n", 0o644),
        "trialbox-venv/bin/python": (python.path.encode(), LINK_MODE),
        "trialbox-venv/bin/python3": (b"python", LINK_MODE),
        f"{site}/container_runtime/__init__.py": (b"", 0o644),
        f"{site}/pydantic_core/_core.so": (b"\x7fELF", 0o755),
    }
    monkeypatch.setattr(venv_store, "venv_files", lambda *_: layer)
    monkeypatch.setattr(venv_store, "store_root", lambda: tmp_path / "venvs")
    monkeypatch.setattr(venv_store, "_compile", lambda folder, *_: compiled.append(folder))
    old_umask = os.umask(0o077)
    try:
        folder = venv_store.venv_folder_blocking(python, "x86_64", "sha256:image")
    finally:
        os.umask(old_umask)

    assert folder == tmp_path / "venvs" / venv_key(python, "x86_64") and len(compiled) == 1
    made = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir()}
    assert made == {name.removeprefix("trialbox-venv/") for name in layer}
    assert os.readlink(folder / "bin" / "python") == python.path
    assert os.readlink(folder / "bin" / "python3") == "python"
    assert "version = 3.11.2" in (folder / "pyvenv.cfg").read_text()
    modes = {
        p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in [folder, *folder.rglob("*")]
        if not p.is_symlink()
    }
    assert {mode for name, mode in modes.items() if not name.endswith(".so")} == {0o755, 0o644}
    assert modes["lib/python3.11/site-packages/pydantic_core/_core.so"] == 0o755
    assert modes["."] == modes["lib"] == 0o755 and modes["pyvenv.cfg"] == 0o644
    assert venv_store.venv_folder_blocking(python, "x86_64", "sha256:image") == folder
    assert len(compiled) == 1
    assert [p.name for p in (tmp_path / "venvs").iterdir()] == [folder.name]  # no staging


def test_a_bundle_s_image_over_a_mounted_venv_holds_the_whole_venv() -> None:
    """A read-only mount takes no more packages: the bundle's image gets the venv itself,
    the packages in its site-packages, in one COPY; over a venv in the image, only them."""
    python = _python()
    venv = {"trialbox-venv/pyvenv.cfg": (b"cfg", 0o644)}
    files = {"openai/__init__.py": (b"", 0o644)}

    whole = extra_context("trialbox-env:base", python, files, venv)
    added = extra_context("trialbox-env:base", python, files)

    assert set(whole) == {
        "Dockerfile", "trialbox-venv/pyvenv.cfg",
        "trialbox-venv/lib/python3.11/site-packages/openai/__init__.py",
    }  # fmt: skip
    assert whole["Dockerfile"][0].decode().endswith("COPY trialbox-venv /opt/trialbox/venv\n")
    assert set(added) == {"Dockerfile", "trialbox-venv-extra/openai/__init__.py"}
    assert (
        added["Dockerfile"][0]
        .decode()
        .endswith("COPY trialbox-venv-extra /opt/trialbox/venv/lib/python3.11/site-packages/\n")
    )


async def test_the_backend_mounts_the_venv_its_builder_keeps_outside_the_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside the spec's own mounts, read-only; an image the builder knows no mount for,
    and a spec that mounts that path already, are created as they are."""
    builder = ImageBuilder(mount_runtime=True)
    venv = Mount(source="/store/cp3.11-x", target="/opt/trialbox/venv")

    async def runtime_mount(tag: str) -> Mount | None:
        return venv if tag == "trialbox-env:mounted" else None

    created: list[SandboxSpec] = []

    async def create(spec: SandboxSpec, *_: object) -> SandboxSpec:
        created.append(spec)
        return spec

    monkeypatch.setattr(builder, "runtime_mount", runtime_mount)
    monkeypatch.setattr(DockerSandbox, "create", create)
    backend = DockerBackend(builder=builder)
    monkeypatch.setattr(backend, "capabilities", lambda: _capabilities())
    gateway = Mount(source="/slots/t", target="/run/trialbox-gateway")
    spec = SandboxSpec(image="trialbox-env:mounted", trial_id="t", job_id="j", owner="o",
                       mounts=(gateway,))  # fmt: skip

    await backend.create_sandbox(spec)
    await backend.create_sandbox(spec.model_copy(update={"image": "trialbox-env:other"}))
    await backend.create_sandbox(spec.model_copy(update={"mounts": (venv,)}))

    assert [s.mounts for s in created] == [(gateway, venv), (gateway,), (venv,)]
    assert venv.read_only


async def _capabilities() -> Capabilities:
    return Capabilities()


def test_a_host_enforcing_selinux_mounts_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its containers could not read a folder nobody labelled for them: the venv goes into
    the images instead (the engine is not asked)."""
    enforce = tmp_path / "enforce"
    enforce.write_text("1\n")
    monkeypatch.setattr(venv_store, "SELINUX_ENFORCE", enforce)
    monkeypatch.setattr(venv_store.docker_api, "docker_client", lambda: pytest.fail("asked"))
    assert venv_store.engine_sees_store_blocking() is False
