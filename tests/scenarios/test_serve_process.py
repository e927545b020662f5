"""`trialbox serve` as a real process on 127.0.0.1: it scores a rollout, and a signal ends it
without leaving a container behind, also when a rollout is still running."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import docker
import pytest

from tests.conftest import EXAMPLES, TEST_OWNER, our_containers
from tests.scenarios.helpers import MAPPING, serve

pytestmark = pytest.mark.docker


def until_a_running_container_of_ours(client: docker.DockerClient, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while True:
        running = client.containers.list(
            ignore_removed=True,
            filters={"label": f"trialbox.owner={TEST_OWNER}", "status": "running"},
        )
        if running:
            return
        assert time.monotonic() < deadline, f"no running container of ours within {within} s"
        time.sleep(0.1)


def test_serve_scores_a_hello_oracle_rollout_and_exits_on_sigint_leaving_no_container(
    docker_client: docker.DockerClient, docker_ready: object, tmp_path: Path
) -> None:
    args = ["--task", str(EXAMPLES / "hello-oracle"), "--agent", "oracle"]
    with serve(*args, "--jobs-dir", str(tmp_path / "jobs"), *MAPPING, log_dir=tmp_path) as server:
        server.submit("proc::hello")
        doc = server.until_final("proc::hello")
        assert (doc["status"], doc["reward"], doc["error"]) == ("success", 1.0, None)
        assert json.loads(Path(doc["trial_dir"], "result.json").read_text())["reward"] == 1.0

        assert server.stop(signal.SIGINT) == 0, server.output()
        assert "Application shutdown complete" in server.output()

    assert our_containers(docker_client) == []


def test_serve_on_sigterm_aborts_a_running_rollout_and_exits_leaving_no_container(
    docker_client: docker.DockerClient, docker_ready: object, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs"
    args = ["--task", str(EXAMPLES / "hello-oracle"), "--allow-agent", "command:sleep 60",
            "--drain-sec", "1", "--jobs-dir", str(jobs), *MAPPING]  # fmt: skip
    with serve(*args, log_dir=tmp_path) as server:
        server.submit("proc::long", agent="command:sleep 60")
        until_a_running_container_of_ours(docker_client)
        assert server.status("proc::long")["status"] == "running"

        # uvicorn shuts down gracefully, then re-raises SIGTERM so a supervisor sees it.
        assert server.stop(signal.SIGTERM) == -signal.SIGTERM, server.output()
        assert "Application shutdown complete" in server.output()

    assert our_containers(docker_client) == []
    [written] = list(jobs.glob("*/*/result.json"))
    result = json.loads(written.read_text())
    assert (result["status"], result["agent"]["termination"]) == ("cancelled", "aborted")
