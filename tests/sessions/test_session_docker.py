"""A session on a real engine: examples/hello-oracle solved by commands and files through
`TrialEngine.open_session`, verified in the same container with reward 1, and no container
left afterwards (docs/sessions.md)."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from orchestrator import TrialConfig, TrialEngine
from tests.conftest import EXAMPLES, ContainerWatch

pytestmark = pytest.mark.docker

HELLO = EXAMPLES / "hello-oracle"


async def test_a_session_solves_hello_oracle_by_commands_and_leaves_no_container(
    config: TrialConfig, docker_client: docker.DockerClient, container_watch: ContainerWatch
) -> None:
    async with TrialEngine(config=config, job_id=container_watch.job_id) as engine:
        async with await engine.open_session(
            task=HELLO, session_id="docker-session", metadata={"label": "secret"}
        ) as session:
            looked = await session.exec("ls /tests 2>&1; cat /logs/agent/container_input.json")
            slow = await session.exec("sleep 30 & sleep 30", timeout_sec=1)
            procs = await session.exec(
                "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
            )
            await session.write_file("/app/draft.txt", b"Hello, trialbox!\n")
            draft = await session.read_file("/app/draft.txt")
            moved = await session.exec(argv=["cp", "/app/draft.txt", "/app/hello.txt"])
            said = await session.exec("cat /app/hello.txt; echo oops >&2; exit 3", cwd="/app")
            result = await session.verify()

    assert "secret" not in looked.stdout and "No such file" in looked.stdout
    assert json.loads(looked.stdout.splitlines()[-1])["metadata"] == {}
    assert (slow.timed_out, slow.exit_code) == (True, 124)
    assert procs.stdout.count("\n") >= 2 and "sleep 30" not in procs.stdout  # the group is gone
    assert draft == b"Hello, trialbox!\n"
    assert moved.exit_code == 0
    assert (said.exit_code, said.channel) == (3, True)  # through the command channel
    assert (said.stdout, said.stderr) == ("Hello, trialbox!\n", "oops\n")
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert result.agent_spec == "session"
    assert (Path(result.trial_dir) / "result.json").is_file()
    assert result.session is not None
    assert (result.session.commands, result.session.timed_out) == (5, 1)
    assert (result.session.writes, result.session.reads) == (1, 1)
    assert 1 <= result.session.longest_command_sec <= result.session.commands_sec
    doc = json.loads((Path(result.trial_dir) / "logs/agent/trajectory.json").read_text())
    tools = [step["tool_calls"][0]["function_name"] for step in doc["steps"][1:]]
    assert tools == ["exec", "exec", "exec", "write_file", "read_file", "exec", "exec"]
    last = doc["steps"][-1]["observation"]["results"][0]["content"]
    assert last == "Hello, trialbox!\noops\n"
    assert len(container_watch.created()) == 1
    left = docker_client.containers.list(
        all=True, filters={"label": f"trialbox.job={container_watch.job_id}"}
    )
    assert left == []


async def test_without_the_fast_path_each_command_is_a_plain_exec_with_merged_output(
    config: TrialConfig, container_watch: ContainerWatch
) -> None:
    async with TrialEngine(config=config, job_id=container_watch.job_id) as engine:
        async with await engine.open_session(task=HELLO, fast_path=False) as session:
            said = await session.exec("echo out; echo err >&2; exit 2")
            slow = await session.exec("sleep 30", timeout_sec=0.5)

    assert (said.exit_code, said.channel, said.stderr) == (2, False, "")
    assert sorted(said.stdout.splitlines()) == ["err", "out"]  # Docker's pipes, either order
    assert (slow.timed_out, slow.exit_code, slow.channel) == (True, 124, False)


async def test_a_command_that_kills_its_channel_ends_as_killed_and_the_session_goes_on(
    config: TrialConfig, container_watch: ContainerWatch
) -> None:
    async with TrialEngine(config=config, job_id=container_watch.job_id) as engine:
        async with await engine.open_session(task=HELLO) as session:
            broke = await session.exec("kill -9 $PPID")  # the channel's loop: its own doing
            after = await session.exec("echo still here")
            result = await session.verify()

    assert (broke.exit_code, broke.channel) == (137, True)
    assert "broke its command channel" in broke.stderr
    assert (after.exit_code, after.stdout, after.channel) == (0, "still here\n", True)
    assert result.error is None or result.error.category != "infra", result.error
