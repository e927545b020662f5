"""A `trialbox serve` killed with SIGKILL, and the server started after it on the same jobs
folder, as real processes on the real engine: the successor removes the sandbox its dead
predecessor left running and names it; a live server's sandbox on the same folder, and a dead
server's on another folder, are left alone. Each server prints its job id and owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import httpx

from orchestrator.common.ids import trial_id_for
from tests.conftest import BASE_IMAGE, REPO_ROOT, TEST_OWNER, remove_trial_container
from tests.faults.helpers import JOB_LINE
from tests.jobs.helpers import make_tasks
from tests.service.test_service_promises import free_port


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def submit(self, rollout_id: str) -> None:
        answer = httpx.post(
            f"http://127.0.0.1:{self.port}/rollouts", json={"rollout_id": rollout_id}
        )
        assert answer.status_code == 202, answer.text

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        assert self.process.wait(timeout=10) == -signal.SIGKILL


@contextmanager
def serve(task: Path, jobs_dir: Path, log: Path) -> Iterator[Server]:
    """`trialbox serve` on 127.0.0.1 at a free port in its own session, answering /healthz
    (so its start, and what it removes then, is over); SIGKILLed after, if still running."""
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve", "--task", str(task),
             "--agent", "command:sleep 300", "--jobs-dir", str(jobs_dir),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    server = Server(process, port, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, server.output
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, server.output
            time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def containers_of(
    client: docker.DockerClient, rollout_id: str
) -> list[docker.models.containers.Container]:
    labels = [f"trialbox.trial={trial_id_for(rollout_id)}", f"trialbox.owner={TEST_OWNER}"]
    return client.containers.list(ignore_removed=True, all=True, filters={"label": labels})


def wait_running(client: docker.DockerClient, rollout_id: str, server: Server) -> str:
    """The name of the rollout's container once it runs."""
    deadline = time.monotonic() + 120
    while True:
        running = [c for c in containers_of(client, rollout_id) if c.status == "running"]
        if running:
            return running[0].name
        assert server.process.poll() is None, server.output
        assert time.monotonic() < deadline, f"no running container for {rollout_id}"
        time.sleep(0.1)


def test_a_server_removes_what_its_sigkilled_predecessor_left_and_nothing_else(
    tmp_path: Path, docker_ready: docker.DockerClient
) -> None:
    [task] = make_tasks(tmp_path, "sleepy", dockerfile=f"FROM {BASE_IMAGE}\n")
    here, elsewhere = tmp_path / "jobs", tmp_path / "other-jobs"
    tag = uuid.uuid4().hex[:8]
    killed, live, killed_elsewhere = f"killed-{tag}", f"live-{tag}", f"elsewhere-{tag}"
    try:
        with ExitStack() as servers:
            first = servers.enter_context(serve(task, here, tmp_path / "first.log"))
            neighbour = servers.enter_context(serve(task, here, tmp_path / "neighbour.log"))
            other = servers.enter_context(serve(task, elsewhere, tmp_path / "other.log"))
            for server, rollout_id in (
                (first, killed),
                (neighbour, live),
                (other, killed_elsewhere),
            ):
                server.submit(rollout_id)
            left = wait_running(docker_ready, killed, first)
            kept = wait_running(docker_ready, live, neighbour)
            wait_running(docker_ready, killed_elsewhere, other)
            first.kill()
            other.kill()
            assert [c.name for c in containers_of(docker_ready, killed)] == [left]

            successor = servers.enter_context(serve(task, here, tmp_path / "successor.log"))

            assert containers_of(docker_ready, killed) == []
            assert "removed 1 sandbox(es) that dead trialbox process(es) left" in successor.output
            assert left in successor.output
            [running] = containers_of(docker_ready, live)
            assert (running.name, running.status) == (kept, "running")
            assert len(containers_of(docker_ready, killed_elsewhere)) == 1
            jobs = []
            for server in (first, successor):
                line = JOB_LINE.search(server.output)
                assert line is not None, server.output
                assert line["owner"] == TEST_OWNER and line["job"].startswith("serve")
                jobs.append(line["job"])
            assert jobs[0] != jobs[1]
    finally:
        for rollout_id in (killed, live, killed_elsewhere):
            for container in containers_of(docker_ready, rollout_id):
                remove_trial_container(container)
