"""`trialbox run` stopped by a signal: SIGINT, SIGTERM and SIGHUP cancel the running trials,
which write their result.json and remove their containers, and the command exits with
128 + the signal's number; after a SIGKILL, `trialbox reap --job` (from the line printed at
start) removes the leftovers.

Each test runs the real command on a task whose agent sleeps, with two trials at once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.conftest import TEST_OWNER
from tests.faults.helpers import MAPPING, RunProcess, job_containers, trialbox, wait_for

pytestmark = pytest.mark.docker

# Before the agents run: the task's image may need a build, cached after the first test.
START_WITHIN = 300
# After the signal: the relay's abort (TERM to the group, a sleep dies at once) and the
# removal of two containers take seconds; this bounds it with a wide margin.
STOP_WITHIN = 90


def start_sleepers(make_task, tmp_path: Path) -> tuple[RunProcess, str]:
    """`trialbox run` of two attempts of `sleep 60`, both running; returns it and its job."""
    task = make_task("sleeper")
    run = RunProcess(
        [str(task), "--agent", "command:sleep 60", "--n-concurrent", "2", "--attempts", "2",
         "--jobs-dir", str(tmp_path / "jobs"), *MAPPING],
        tmp_path / "cli",
    )  # fmt: skip
    line = run.job_line()
    assert line["owner"] == TEST_OWNER
    assert line["reap"] == line["job"]
    return run, line["job"]


def wait_until_agents_sleep(client: docker.DockerClient, run: RunProcess, job: str) -> list:
    """Both containers of the job run and each has the agent's `sleep 60` in it."""

    def sleeping() -> list | None:
        run._check_alive()
        running = [c for c in job_containers(client, TEST_OWNER, job) if c.status == "running"]
        if len(running) != 2:
            return None
        for container in running:
            try:
                processes = container.top().get("Processes") or []
            except docker.errors.NotFound:  # gone meanwhile: look again
                return None
            if not any("sleep 60" in " ".join(p) for p in processes):
                return None
        return running

    return wait_for(sleeping, START_WITHIN, what=f"two agents sleeping\n{run.output()}")


def results_of(tmp_path: Path, job: str) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in sorted((tmp_path / "jobs" / job).glob("*/result.json"))
    ]


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_signal_cancels_the_trials_writes_their_results_and_exits_with_its_code(
    docker_ready: docker.DockerClient, make_task, tmp_path: Path, signum: int, code: int
) -> None:
    run, job = start_sleepers(make_task, tmp_path)
    try:
        wait_until_agents_sleep(docker_ready, run, job)
        run.process.send_signal(signum)
        returncode = run.wait(STOP_WITHIN)
    finally:
        run.kill()

    assert returncode == code, run.output()
    assert f"interrupted by {signal.Signals(signum).name}" in run.output()
    results = results_of(tmp_path, job)
    assert len(results) == 2, run.output()
    for result in results:
        assert result["status"] == "cancelled"
        assert result["agent"]["termination"] == "aborted"
    assert job_containers(docker_ready, TEST_OWNER, job) == []


def test_a_second_signal_does_not_cut_the_teardown_short(
    docker_ready: docker.DockerClient, make_task, tmp_path: Path
) -> None:
    run, job = start_sleepers(make_task, tmp_path)
    try:
        wait_until_agents_sleep(docker_ready, run, job)
        run.process.send_signal(signal.SIGTERM)
        wait_for(lambda: "cancelling the running trials" in run.output(), 30, what="the note")
        run.process.send_signal(signal.SIGINT)  # while the first one's teardown runs
        returncode = run.wait(STOP_WITHIN)
    finally:
        run.kill()

    assert returncode == 143, run.output()  # the first signal's code
    assert "Traceback" not in run.output()
    results = results_of(tmp_path, job)
    assert [r["status"] for r in results] == ["cancelled", "cancelled"], run.output()
    assert job_containers(docker_ready, TEST_OWNER, job) == []


def test_after_sigkill_reap_with_the_printed_job_removes_the_leftovers(
    docker_ready: docker.DockerClient, make_task, tmp_path: Path
) -> None:
    run, job = start_sleepers(make_task, tmp_path)
    try:
        wait_until_agents_sleep(docker_ready, run, job)
        run.process.send_signal(signal.SIGKILL)
        assert run.wait(30) == -signal.SIGKILL
    finally:
        run.kill()
    left = job_containers(docker_ready, TEST_OWNER, job)
    assert len(left) == 2  # a SIGKILLed run cannot tear down: this is what reap is for

    reaped = trialbox("reap", "--job", job)

    assert reaped.returncode == 0, reaped.stdout + reaped.stderr
    assert "removed 2 container(s)" in reaped.stdout
    assert job_containers(docker_ready, TEST_OWNER, job) == []
