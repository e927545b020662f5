"""A trainer-side episode through the session client (orchestrator/client.py) against a real
`trialbox serve` process on 127.0.0.1: open a session on examples/hello-oracle, solve it by
commands, verify it, and get the reward an oracle rollout of the same task gets; the server
then exits on SIGINT leaving no container and no process."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import docker
import pytest

from orchestrator.client import SyncTrialboxClient
from tests.conftest import EXAMPLES, our_containers
from tests.scenarios.helpers import MAPPING, serve

pytestmark = pytest.mark.docker

HELLO = EXAMPLES / "hello-oracle"


def test_the_client_solves_hello_oracle_by_commands_and_gets_the_oracle_s_reward(
    docker_client: docker.DockerClient, docker_ready: object, tmp_path: Path
) -> None:
    args = ["--task", str(HELLO), "--agent", "oracle", "--jobs-dir", str(tmp_path / "jobs")]
    with serve(*args, *MAPPING, log_dir=tmp_path) as server:
        base_url = str(server.http.base_url)
        with SyncTrialboxClient(base_url) as client:
            with client.open_session(session_id="trainer::ep-1") as session:
                info = session.status()
                assert (info.status, info.instruction) == ("ready", HELLO.joinpath(
                    "instruction.md").read_text())  # fmt: skip
                looked = session.exec("cat /app/hello.txt")
                solved = session.exec((HELLO / "solution" / "solve.sh").read_text())
                said = session.read_file("/app/hello.txt")
                timed_out = session.exec("sleep 30", timeout_sec=0.5)
                after = session.exec(argv=["cat", "/app/hello.txt"])
                result = session.verify()
            closed = session.status()

        server.submit("trainer::oracle")  # the same task as a whole rollout, for comparison
        oracle = server.until_final("trainer::oracle")

        assert server.stop(signal.SIGINT) == 0, server.output()
        assert server.process.poll() is not None

    assert looked.exit_code != 0  # not solved yet
    assert (solved.exit_code, solved.timed_out) == (0, False), solved.stdout
    assert said == b"Hello, trialbox!\n"
    assert (timed_out.timed_out, timed_out.exit_code) == (True, 124)
    assert (after.exit_code, after.stdout) == (0, "Hello, trialbox!\n")  # usable after a timeout
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert (oracle["status"], oracle["reward"]) == ("success", result.reward)
    assert (closed.status, closed.result is not None and closed.result.reward) == ("closed", 1.0)
    written = json.loads(Path(result.trial_dir or "", "result.json").read_text())
    assert (written["agent_spec"], written["session_id"], written["reward"]) == (
        "session", "trainer::ep-1", 1.0,
    )  # fmt: skip
    assert our_containers(docker_client) == []
