"""A Dockerfile step that fails because the build cannot reach the internet is this
machine's limit, not the task's fault: `infra` (discard, retry where builds have the
internet), never a `validation` that would write the task off as broken."""

from __future__ import annotations

import pytest

from orchestrator import TrialConfig, run_trial
from orchestrator.backends.docker.build import offline_build
from tests.conftest import DEFAULT_DOCKERFILE, MakeTask

FAILED_RUN = "The command '/bin/sh -c apt-get update' returned a non-zero code: 100"


@pytest.mark.parametrize(
    "printed",
    [
        "W: Failed to fetch http://mirror.example.test/debian/dists/bookworm/InRelease  "
        "Temporary failure resolving 'mirror.example.test'",
        "curl: (6) Could not resolve host: code.example.test",
        "WARNING: Retrying ... Failed to establish a new connection: [Errno -3] "
        "Temporary failure in name resolution",
        "error: Failed to fetch: `https://files.example.test/x.whl` Caused by: dns error",
        "npm ERR! errno ENOTFOUND getaddrinfo ENOTFOUND registry.example.test",
    ],
)
def test_the_words_of_an_unreachable_network_mark_a_failed_step_offline(printed: str) -> None:
    lines = ["Step 1/3 : FROM debian", "Step 2/3 : RUN apt-get update", printed, FAILED_RUN]
    assert offline_build(FAILED_RUN, lines)


@pytest.mark.parametrize(
    "printed",
    [
        "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE could not resolve",
        "[ERROR] Failed to execute goal on project app: Could not resolve dependencies for "
        "project com.example:app:jar:1.0",
        "> Could not resolve com.example:missing:1.0.",
        "E: Unable to locate package no-such-package",  # the mirror answered: no such package
    ],
)
def test_a_dependency_that_does_not_exist_stays_the_tasks_fault(printed: str) -> None:
    lines = ["Step 1/2 : FROM debian", "Step 2/2 : RUN install-things", printed, FAILED_RUN]
    assert not offline_build(FAILED_RUN, lines)


def test_an_offline_apt_update_then_a_failed_install_is_offline() -> None:
    lines = [
        "Step 2/3 : RUN apt-get update",
        "W: Failed to fetch http://mirror.example.test/debian/dists/bookworm/InRelease  "
        "Temporary failure resolving 'mirror.example.test'",  # a warning: the step exits 0
        "Step 3/3 : RUN apt-get install -y curl",
        "E: Unable to locate package curl",
    ]
    failed = "The command '/bin/sh -c apt-get install -y curl' returned a non-zero code: 100"
    assert offline_build(failed, [*lines, failed])


def test_only_the_failing_steps_output_counts() -> None:
    earlier = [
        "Step 2/3 : RUN apt-get update || true",
        "Temporary failure resolving 'mirror.example.test'",
        "Step 3/3 : RUN test -f /missing",
    ]
    failed = "The command '/bin/sh -c test -f /missing' returned a non-zero code: 1"
    assert not offline_build(failed, [*earlier, failed])
    assert not offline_build("dockerfile parse error line 3", ["could not resolve host"])


async def test_a_step_that_cannot_reach_the_network_is_infra_with_a_hint(
    config: TrialConfig, make_task: MakeTask
) -> None:
    # The step prints what apt prints on a machine without internet and exits as apt does;
    # the test itself sends nothing off this machine.
    step = "RUN echo \"E: Temporary failure resolving 'mirror.example.test'\" && exit 100\n"
    task = make_task(dockerfile=DEFAULT_DOCKERFILE + step)
    result = await run_trial(task, "nop", config=config)
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("infra", "image")
    assert result.error.type == "ImageBuildError"
    assert "returned a non-zero code: 100" in result.error.message
    assert "builds have no internet" in result.error.message
    assert result.reward is None


async def test_pip_install_without_the_internet_is_infra_in_one_line_that_says_what_to_do(
    config: TrialConfig, make_task: MakeTask
) -> None:
    # A real pip that cannot reach its index, bounded (one retry, 2 s); `.invalid` never
    # resolves (RFC 6761), so the step fails as offline on any machine and fetches nothing.
    step = (
        "RUN PIP_INDEX_URL=https://pypi.invalid/simple PIP_RETRIES=1 PIP_TIMEOUT=2 "
        "pip install --no-cache-dir some-package\n"
    )
    task = make_task(dockerfile=DEFAULT_DOCKERFILE + step)
    result = await run_trial(task, "nop", config=config)
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("infra", "image")
    said = result.error.message.splitlines()[0]  # the log's tail follows, under its heading
    assert "pip install --no-cache-dir some-package' returned a non-zero code" in said
    for advice in ("builds have no internet", "wheelhouse", "--base-image", "docker_image"):
        assert advice in said, advice
    assert result.reward is None
