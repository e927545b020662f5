"""Image rules that need no engine: which stages could add a python3, the general layer never
failing, how a failed pull is classified, `force_build` without a Dockerfile, the fake
backend's image contract (runtime, warnings, the two ways' tags)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import TaskError, load_task
from orchestrator.backends.docker.dockerfile import (
    final_stage_base,
    final_stage_image,
    final_stage_may_add_python,
    runtime_block,
)
from orchestrator.backends.docker.images import ImageBuilder
from orchestrator.backends.docker.pulls import _PullFailed
from orchestrator.backends.fake import FakeBackend
from orchestrator.sandbox import ImageOutcome
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
