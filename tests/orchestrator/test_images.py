"""Task images: content-hashed tags, one build for identical tasks, the patch in a real build."""

from __future__ import annotations

import asyncio
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from orchestrator import TaskError, TrialConfig, load_task, run_trial
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.images import TASK_REPO, ImageBuilder

REPO_ROOT = Path(__file__).resolve().parents[2]
HELLO = REPO_ROOT / "examples" / "hello-oracle"
BASE_MAP = {"python:3.11-slim-bookworm": "trialbox-base/python3:bookworm"}


@pytest.fixture
def built_tags(docker_ready: docker.DockerClient) -> Iterator[set[str]]:
    """Tags added here are removed after the test, so every run builds afresh."""
    tags: set[str] = set()
    yield tags
    for tag in tags:
        try:
            docker_ready.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass


async def test_identical_tasks_share_one_build(make_task, built_tags: set[str]) -> None:
    marker = uuid.uuid4().hex
    dockerfile = f"FROM python:3.11-slim-bookworm\nWORKDIR /app\nRUN echo {marker}\n"
    first = load_task(make_task("first", dockerfile=dockerfile))
    second = load_task(make_task("second", dockerfile=dockerfile, instruction="Other words.\n"))
    builder = ImageBuilder()

    plans = [await builder.plan(t, BASE_MAP) for t in (first, second)]
    built_tags.add(plans[0].tag)
    assert plans[0].tag == plans[1].tag

    outcomes = await asyncio.gather(
        builder.ensure_image(first, BASE_MAP), builder.ensure_image(second, BASE_MAP)
    )
    assert sorted(o.status for o in outcomes) == ["built", "cached"]
    assert {o.tag for o in outcomes} == {plans[0].tag}
    again = await ImageBuilder().ensure_image(first, BASE_MAP)
    assert (again.tag, again.status) == (plans[0].tag, "cached")

    image = docker.from_env().images.get(plans[0].tag)
    assert plans[0].tag in image.tags and plans[0].tag.startswith(f"{TASK_REPO}:")


async def test_the_tag_is_a_hash_of_the_build_inputs(make_task, docker_ready) -> None:
    builder = ImageBuilder()
    base = load_task(make_task("base", files={"environment/data.txt": "one\n"}))
    same = load_task(make_task("same", files={"environment/data.txt": "one\n"}))
    other_file = load_task(make_task("other", files={"environment/data.txt": "two\n"}))
    executable = make_task("exec", files={"environment/data.txt": "one\n"})
    (executable / "environment" / "data.txt").chmod(0o755)
    tests_differ = load_task(
        make_task("tests", files={"environment/data.txt": "one\n"}, test_sh="#!/bin/sh\n")
    )

    tag = (await builder.plan(base, BASE_MAP)).tag
    assert tag.startswith(f"{TASK_REPO}:")
    assert (await builder.plan(base, BASE_MAP)).tag == tag
    assert (await builder.plan(same, BASE_MAP)).tag == tag
    # Only the build context (environment/) and the mapping count, not tests or solution.
    assert (await builder.plan(tests_differ, BASE_MAP)).tag == tag
    assert (await builder.plan(other_file, BASE_MAP)).tag != tag
    assert (await builder.plan(load_task(executable), BASE_MAP)).tag != tag
    assert (await builder.plan(base, {})).tag != tag


async def test_plan_mounts_a_venv_for_the_base_images_own_python(make_task, docker_ready) -> None:
    """On a local engine the image is the task's own build: its Dockerfile mapped, nothing
    added to it or its context; the venv is mounted for the base image's CPython."""
    task = make_task(files={"environment/data.txt": "one\n"})
    plan = await ImageBuilder(mount_runtime=True).plan(load_task(task), BASE_MAP)

    assert plan.dockerfile == "FROM trialbox-base/python3:bookworm\nWORKDIR /app\n"
    assert set(plan.context) == {"Dockerfile", "data.txt"}
    assert (plan.mount_runtime, plan.runtime) == (True, "present")
    assert plan.python is not None and plan.python.minor == "3.11"
    assert plan.probed_in == docker_ready.images.get("trialbox-base/python3:bookworm").id


async def test_plan_copies_a_venv_for_the_base_images_own_python(make_task, docker_ready) -> None:
    """Where no venv can be mounted, the base image's CPython is probed once: the venv
    arrives as one COPY of build-context files linking to it, with no RUN step and no uv or
    wheelhouse in the image."""
    plan = await ImageBuilder(mount_runtime=False).plan(load_task(make_task()), BASE_MAP)

    assert plan.dockerfile.startswith("FROM trialbox-base/python3:bookworm\nWORKDIR /app\n")
    assert plan.dockerfile.endswith("COPY trialbox-venv /opt/trialbox/venv\n")
    assert "RUN" not in plan.dockerfile and "/uv" not in plan.dockerfile
    assert plan.python is not None and plan.python.minor == "3.11"
    assert plan.runtime == "present"
    link, mode = plan.context["trialbox-venv/bin/python"]
    assert (link.decode(), stat.S_ISLNK(mode)) == (plan.python.path, True)
    cfg = plan.context["trialbox-venv/pyvenv.cfg"][0].decode()
    assert f"version = {plan.python.version}" in cfg
    site = "trialbox-venv/lib/python3.11/site-packages/"
    assert f"{site}container_runtime/__init__.py" in plan.context
    assert any(
        name.startswith(f"{site}pydantic_core/_pydantic_core.cpython-311") for name in plan.context
    )
    assert plan.context["Dockerfile"][0] == plan.dockerfile.encode()
    assert plan.timeout_sec == 600.0


async def test_a_base_image_whose_python_is_unknown_gets_the_general_layer(
    make_task, docker_ready
) -> None:
    """Where no venv can be mounted (a remote engine)."""
    builder = ImageBuilder(mount_runtime=False)
    plan = await builder.plan(load_task(make_task(dockerfile="FROM scratch\n")), BASE_MAP)
    tools = await builder.tools_image()

    assert (plan.python, plan.runtime) == (None, "unknown")
    assert f"COPY --from={tools} /uv /opt/trialbox/uv" in plan.dockerfile
    assert set(plan.context) == {"Dockerfile"}


async def test_prebuilt_image_task_gets_the_runtime_layer(make_task, docker_ready) -> None:
    task = make_task(
        "prebuilt",
        dockerfile=None,
        task_toml='[environment]\ndocker_image = "python:3.11-slim-bookworm"\n',
    )
    plan = await ImageBuilder(mount_runtime=False).plan(load_task(task), BASE_MAP)

    assert plan.dockerfile.startswith("FROM trialbox-base/python3:bookworm\n")
    assert "/opt/trialbox/venv" in plan.dockerfile
    assert {name.split("/")[0] for name in plan.context} == {"Dockerfile", "trialbox-venv"}
    assert (plan.runtime, plan.image_id, plan.warnings) == ("present", None, ())


@pytest.mark.parametrize("mounted", [True, False], ids=["mounted", "in-image"])
async def test_non_root_user_is_restored_after_the_patch(
    config: TrialConfig, make_task, mounted: bool
) -> None:
    """The agent and the verifier run as the image's USER, and a non-root user runs the
    runtime, mounted or built into the image by the general layer."""
    # No marker: built once per session, then shared by the tests that ask for it.
    task = make_task(
        "as-nobody",
        dockerfile="FROM python:3.11-slim-bookworm\nUSER nobody\nWORKDIR /tmp\n",
        test_sh=(
            "#!/bin/sh\nid -un\n"
            "/opt/trialbox/venv/bin/python -c 'import container_runtime, pydantic' "
            "&& echo 1 > /logs/verifier/reward.txt\n"
        ),
    )
    backend = DockerBackend(config.limits, builder=ImageBuilder(mount_runtime=mounted))
    result = await run_trial(task, "command:id -un", config=config, backend=backend)

    assert result.error is None, result.error
    assert result.reward == 1.0
    logs = Path(result.trial_dir) / "logs"
    assert (logs / "agent" / "stdout.txt").read_text() == "nobody\n"
    # As in Harbor, the verifier runs as the image's USER; /tests was handed to it.
    assert (logs / "verifier" / "test-stdout.txt").read_text().startswith("nobody\n")


async def test_plan_refuses_symlinks_out_of_the_task(
    make_task, tmp_path: Path, docker_ready
) -> None:
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host secret\n")
    task = make_task("leaky")
    (task / "environment" / "leak.txt").symlink_to(outside)

    try:
        plan = await ImageBuilder().plan(load_task(task), BASE_MAP)
    except TaskError:
        return
    assert all(b"host secret" not in data for data, _mode in plan.context.values())


async def test_an_image_whose_steps_remove_python3_still_runs_sh_agents(
    config: TrialConfig, make_task
) -> None:
    """The venv links to the base image's python3, probed before the task's own steps run, so
    a task whose steps remove it still gets the COPY layer ("present", a venv that cannot
    start). Sandboxes, nop and the shell verifier need only sh: the trial still scores."""
    marker = uuid.uuid4().hex
    task = make_task(
        "no-python",
        dockerfile=(
            f"FROM python:3.11-slim-bookworm\nRUN echo {marker} && "
            "rm -f /usr/bin/python3 /usr/bin/python3.* /usr/local/bin/python3*\n"
        ),
    )

    result = await run_trial(task, "nop", config=config)

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 1.0)
