"""Images without python3 build and run; prebuilt `docker_image`s are used as they are, pulled
once, or replaced by environment/Dockerfile with a warning; `force_build` builds the Dockerfile.
The general layer (where no venv can be mounted: `ImageBuilder(mount_runtime=False)`) skips the
venv for a python3 that is missing or too old.

Against the real engine. The python-less base image is built once per session (conftest);
task files carry a fresh marker where a test needs a real build.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from docker.types import Mount as DockerMount

from orchestrator import TaskError, TrialConfig, load_task, run_trial
from orchestrator.backends.docker import images
from orchestrator.backends.docker import prebuilt as prebuilt_module
from orchestrator.backends.docker.images import TASK_REPO, ImageBuilder
from orchestrator.common.errors import ImageBuildError, TaskBuildError
from orchestrator.sandbox.spec import Mount
from tests.conftest import BASE_IMAGE, BASE_IMAGE_MAP, OFFICIAL_IMAGE

MakeTask = Callable[..., Path]
# Nothing listens on the discard port: the engine's pull fails at once with "connection
# refused", a network failure on every machine (a name on Docker Hub would be "not found"
# where the registry answers, and a DNS failure where it does not).
UNPULLABLE = "127.0.0.1:9/trialbox-test/never:1"


def prebuilt(image: str) -> str:
    return f'[environment]\ndocker_image = "{image}"\n'


def run_sh(
    client: docker.DockerClient, image: str, script: str, mount: Mount | None = None
) -> tuple[int, str]:
    """Exit code and output of `sh -c script` in a throwaway container of `image`, with
    `mount` (the runtime venv a sandbox of it mounts) when given."""
    mounts = [] if mount is None else [DockerMount(mount.target, mount.source, type="bind",
                                                   read_only=mount.read_only)]  # fmt: skip
    container = client.containers.create(
        image, ["sh", "-c", script], entrypoint=[], network_mode="none", mounts=mounts
    )
    try:
        container.start()
        code = container.wait(timeout=60)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


async def test_a_dockerfile_from_a_python_less_image_builds_with_no_runtime_layer(
    make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    marker = uuid.uuid4().hex
    task = load_task(
        make_task(
            "no-python",
            dockerfile=f"FROM {no_python}\nWORKDIR /app\nCOPY data.txt /app/\n",
            files={"environment/data.txt": f"{marker}\n"},
        )
    )
    builder = ImageBuilder()

    plan = await builder.plan(task, {})
    assert (plan.runtime, plan.python) == ("absent", None)
    assert plan.dockerfile == f"FROM {no_python}\nWORKDIR /app\nCOPY data.txt /app/\n"
    outcome = await builder.ensure_image(task, {}, plan=plan)

    assert (outcome.tag, outcome.status, outcome.runtime) == (plan.tag, "built", "absent")
    assert outcome.warnings == []
    code, output = await asyncio.to_thread(
        run_sh, docker_ready, outcome.tag,
        "echo ok; cat data.txt; test -e /opt/trialbox || echo no-runtime;"
        " command -v python3 || echo no-python3",
    )  # fmt: skip
    assert (code, output) == (0, f"ok\n{marker}\nno-runtime\nno-python3\n")
    # Unchanged: found again, by a new builder too (the probe's answer is kept on disk).
    again = await ImageBuilder().ensure_image(task, {})
    assert (again.tag, again.status, again.runtime) == (outcome.tag, "cached", "absent")


async def test_a_trial_on_a_python_less_image_runs_an_sh_agent_and_verifier(
    config: TrialConfig, make_task: MakeTask, no_python: str
) -> None:
    task = make_task(
        "no-python-trial",
        dockerfile=f"FROM {no_python}\nWORKDIR /app\n",
        test_sh=(
            "#!/bin/sh\ngrep -qx ok /logs/agent/stdout.txt && echo 1 > /logs/verifier/reward.txt\n"
        ),
    )

    result = await run_trial(task, "command:echo ok", config=config)

    assert result.error is None, result.error
    assert result.reward == 1.0
    assert result.image_tag is not None and result.image_tag.startswith(f"{TASK_REPO}:")


async def test_the_general_layer_skips_the_venv_when_python3_is_missing_or_too_old(
    make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    """Where no venv can be mounted, a RUN step that could install a python3 the base lacks
    gets the general layer ("unknown"); finding none, or one older than 3.9, it says so and
    the build goes on."""
    marker = uuid.uuid4().hex
    old = "/usr/local/bin/python3"
    stub = f"printf '#!/bin/sh\\necho Python 3.8.18\\nexit 1\\n' > {old} && chmod 755 {old}"
    tasks = {
        "missing": f"FROM {no_python}\nRUN echo {marker}\n",
        "too-old": f"FROM {no_python}\nRUN {stub} && echo {marker}\n",
    }
    builder = ImageBuilder(mount_runtime=False)
    plans = {
        name: await builder.plan(load_task(make_task(name, dockerfile=text)), {})
        for name, text in tasks.items()
    }
    assert {plan.runtime for plan in plans.values()} == {"unknown"}

    # Built here, not through ensure_image, to read the log (a cached RUN prints nothing).
    logs = dict(
        zip(
            plans,
            await asyncio.gather(
                *(asyncio.to_thread(images._build_blocking, p, {}) for p in plans.values())
            ),
            strict=True,
        )
    )

    assert (
        "trialbox: no python3 on PATH; the runtime venv (CPython >= 3.9) is skipped"
        in (logs["missing"])
    )
    assert (
        f"trialbox: {old} (Python 3.8.18) is not CPython >= 3.9; the runtime venv is skipped"
        in logs["too-old"]
    )
    for plan in plans.values():
        code, output = await asyncio.to_thread(
            run_sh, docker_ready, plan.tag, "test -e /opt/trialbox/venv || echo no-venv"
        )
        assert (code, output) == (0, "no-venv\n")


async def test_the_general_layer_still_makes_the_venv_for_a_usable_python3(
    make_task: MakeTask, docker_ready: docker.DockerClient
) -> None:
    """Where no venv can be mounted, a context that already has a `trialbox-venv/` folder
    cannot take the one-COPY layer: the general layer builds the venv in the image, as root,
    and gives the image's USER back."""
    task = load_task(
        make_task(
            "general",
            dockerfile=f"FROM {OFFICIAL_IMAGE}\nUSER nobody\nWORKDIR /tmp\n",
            files={"environment/trialbox-venv/keep.txt": f"{uuid.uuid4().hex}\n"},
        )
    )

    outcome = await ImageBuilder(mount_runtime=False).ensure_image(task, BASE_IMAGE_MAP)

    assert (outcome.status, outcome.runtime) == ("built", "unknown")
    code, output = await asyncio.to_thread(
        run_sh, docker_ready, outcome.tag,
        "id -un; /opt/trialbox/venv/bin/python -c 'import container_runtime, pydantic; print(1)'",
    )  # fmt: skip
    assert (code, output) == (0, "nobody\n1\n")


async def test_a_local_prebuilt_image_without_python_is_used_as_it_is(
    make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    task = load_task(make_task("prebuilt", dockerfile=None, task_toml=prebuilt(no_python)))
    image_id = docker_ready.images.get(no_python).id
    builder = ImageBuilder()

    started = time.monotonic()
    plan = await builder.plan(task, {})
    outcome = await builder.ensure_image(task, {}, plan=plan)
    seconds = time.monotonic() - started

    assert (plan.image_id, plan.runtime) == (image_id, "absent")
    assert outcome.tag == plan.tag and outcome.tag.startswith(f"{TASK_REPO}:")
    assert (outcome.status, outcome.runtime, outcome.warnings) == ("cached", "absent", [])
    assert docker_ready.images.get(outcome.tag).id == image_id  # a tag on it, nothing built
    assert seconds < 5, seconds
    code, output = await asyncio.to_thread(run_sh, docker_ready, outcome.tag, "echo ok")
    assert (code, output) == (0, "ok\n")
    again = await ImageBuilder().ensure_image(task, {})
    assert (again.tag, again.status, again.runtime) == (outcome.tag, "cached", "absent")
    # Whoever removes the reported tag (forced, as tests do) only untags the user's image.
    await asyncio.to_thread(docker_ready.images.remove, outcome.tag, force=True)
    assert docker_ready.images.get(no_python).id == image_id


@pytest.mark.parametrize("mounted", [True, False], ids=["mounted", "copied"])
async def test_a_local_prebuilt_image_with_python_gets_the_venv_and_stays_cached(
    make_task: MakeTask, docker_ready: docker.DockerClient, mounted: bool
) -> None:
    """With the venv mounted, the image is used as it is (our tag on it, nothing built) and
    its sandboxes mount the venv; copied, one COPY is built on top of it."""
    task = load_task(make_task("prebuilt-py", dockerfile=None, task_toml=prebuilt(OFFICIAL_IMAGE)))
    builder = ImageBuilder(mount_runtime=mounted)

    first = await builder.ensure_image(task, BASE_IMAGE_MAP)
    again = await ImageBuilder(mount_runtime=mounted).ensure_image(task, BASE_IMAGE_MAP)

    # Used as is, nothing is built; copied, the same content may be built already.
    assert first.status in ({"cached"} if mounted else {"built", "cached"})
    assert (first.runtime, first.warnings) == ("present", [])
    assert (again.tag, again.status, again.runtime) == (first.tag, "cached", "present")
    base_id = docker_ready.images.get(BASE_IMAGE).id
    assert (docker_ready.images.get(first.tag).id == base_id) is mounted
    mount = await builder.runtime_mount(first.tag)
    assert (mount is not None) is mounted
    code, output = await asyncio.to_thread(
        run_sh, docker_ready, first.tag, "/opt/trialbox/venv/bin/python -c 'print(1)'", mount
    )
    assert (code, output) == (0, "1\n")


async def test_an_unpullable_docker_image_falls_back_to_the_dockerfile_with_a_warning(
    make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str, monkeypatch
) -> None:
    pulls: list[str] = []
    real_pull = prebuilt_module._pull_blocking

    def counting_pull(ref: str) -> str:
        pulls.append(ref)
        return real_pull(ref)

    monkeypatch.setattr(prebuilt_module, "_pull_blocking", counting_pull)
    task = load_task(
        make_task(
            "fallback",
            dockerfile=f"FROM {no_python}\nCOPY data.txt /\n",
            files={"environment/data.txt": f"{uuid.uuid4().hex}\n"},
            task_toml=prebuilt(UNPULLABLE),
        )
    )
    builder = ImageBuilder()

    outcomes = await asyncio.gather(builder.ensure_image(task, {}), builder.ensure_image(task, {}))

    assert pulls == [UNPULLABLE]  # one pull for both
    assert sorted(o.status for o in outcomes) == ["built", "cached"]
    assert len({o.tag for o in outcomes}) == 1
    for outcome in outcomes:
        assert outcome.runtime == "absent"
        (warning,) = outcome.warnings
        assert re.fullmatch(
            rf"docker_image {re.escape(UNPULLABLE)} could not be pulled \(.*connection refused.*\);"
            r" built environment/Dockerfile instead",
            warning,
        ), warning
    # The Dockerfile's own tag, as --force-build makes it (which says nothing of a pull).
    forced = await builder.plan(task, {}, force_build=True)
    assert (forced.tag, forced.warnings) == (outcomes[0].tag, ())
    # A failed pull is remembered: the next trial does not try again.
    later = await builder.ensure_image(task, {})
    assert (later.tag, later.status, later.warnings) == (
        outcomes[0].tag, "cached", outcomes[0].warnings,
    )  # fmt: skip
    assert pulls == [UNPULLABLE]


async def test_no_dockerfile_and_an_unpullable_image_is_a_clear_error(
    make_task: MakeTask, docker_ready: docker.DockerClient
) -> None:
    unreachable = load_task(make_task("gone", dockerfile=None, task_toml=prebuilt(UNPULLABLE)))
    bad_reference = load_task(
        make_task("bad-ref", dockerfile=None, task_toml=prebuilt("Not/A-Valid:Ref"))
    )
    builder = ImageBuilder()

    with pytest.raises(ImageBuildError) as network:
        await builder.ensure_image(unreachable, {})
    with pytest.raises(TaskError) as refused:
        await builder.ensure_image(bad_reference, {})

    # The registry could not be reached: the machine's fault.
    assert not isinstance(network.value, TaskBuildError)
    assert network.value.category == "infra"
    message = network.value.message
    assert message.startswith(
        f"[environment] docker_image {UNPULLABLE} in {unreachable.path / 'task.toml'}: the image "
        "is not local and could not be pulled ("
    )
    assert "connection refused" in message
    assert message.endswith(
        f"). Build or load it on this host (docker build -t {UNPULLABLE} ... / docker load), "
        f"map it to a local image with --base-image {UNPULLABLE}=LOCAL "
        "(TrialConfig.base_image_map), or add environment/Dockerfile to the task"
    )
    # The task names an image no registry can have: the task's fault.
    assert refused.value.category == "validation"
    assert "invalid reference format" in str(refused.value)
    assert str(refused.value).startswith("[environment] docker_image Not/A-Valid:Ref in ")


async def test_force_build_builds_the_dockerfile_even_when_the_docker_image_is_local(
    make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    marker = uuid.uuid4().hex
    task = load_task(
        make_task(
            "forced",
            dockerfile=f"FROM {no_python}\nCOPY marker.txt /\n",
            files={"environment/marker.txt": f"{marker}\n"},
            task_toml=prebuilt(no_python),
        )
    )
    builder = ImageBuilder()

    as_is = await builder.ensure_image(task, {})
    forced = await builder.ensure_image(task, {}, force_build=True)

    assert as_is.tag != forced.tag
    assert (forced.status, forced.runtime, forced.warnings) == ("built", "absent", [])
    read = "cat /marker.txt 2>/dev/null || echo none"
    assert await asyncio.to_thread(run_sh, docker_ready, forced.tag, read) == (0, f"{marker}\n")
    assert await asyncio.to_thread(run_sh, docker_ready, as_is.tag, read) == (0, "none\n")
    again = await ImageBuilder().ensure_image(task, {}, force_build=True)
    assert (again.tag, again.status) == (forced.tag, "cached")


async def test_the_two_ways_never_share_a_tag_even_for_the_same_image(
    make_task: MakeTask, docker_ready: docker.DockerClient, no_python: str
) -> None:
    """A Dockerfile that is exactly `FROM <the docker_image>` still gets a tag of its own,
    with python (the venv mounted into both, or the one-COPY layer in both) and without (as
    is vs an empty build)."""
    for mounted in (True, False):
        builder = ImageBuilder(mount_runtime=mounted)
        for image, mapping in ((OFFICIAL_IMAGE, BASE_IMAGE_MAP), (no_python, {})):
            name = f"same-{mounted}-{image.replace(':', '-').replace('/', '-')}"
            dockerfile, toml = f"FROM {image}\n", prebuilt(image)
            task = load_task(make_task(name, dockerfile=dockerfile, task_toml=toml))
            as_is = await builder.plan(task, mapping)
            forced = await builder.plan(task, mapping, force_build=True)
            assert as_is.tag != forced.tag, image
            runtime = "present" if image != no_python else "absent"
            assert as_is.runtime == forced.runtime == runtime
            assert BASE_IMAGE in as_is.dockerfile or as_is.image_id is not None
