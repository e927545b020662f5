"""`--agent mini-swe-agent` in real containers, on an image with no Python at all: the real
package from PyPI, its loop on the host, its actions in the sandbox, its model the scripted
stand-in behind the trial's gateway. Answers are in its default configuration's format: one
`mswea_bash_command` block each, ending with its completion signal."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator import ModelConfig, TrialConfig, TrialResult, run_trial
from tests.support.standin import Reply, StandIn, by_turn

pytestmark = pytest.mark.docker

MakeTask = Callable[..., Path]
UPSTREAM_KEY = "sk-upstream-mini-3b7e1f9a2c"
DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
GREETING_TEST = (
    "#!/bin/sh\nif grep -qx 'hello from mini' /app/greeting.txt; then echo 1; else echo 0; fi"
    " > /logs/verifier/reward.txt\n"
)
# 1 when no `sleep 100` of the agent's is still running when the verifier starts.
NO_SLEEP_LEFT_TEST = (
    "#!/bin/sh\nleft=0\nfor f in /proc/[0-9]*/cmdline; do\n"
    "  tr '\\000' ' ' < \"$f\" 2>/dev/null | grep -q '^sleep 100' && left=1\ndone\n"
    "echo $((1 - left)) > /logs/verifier/reward.txt\n"
)


def action(command: str, thought: str = "THOUGHT: the next step.") -> Reply:
    return Reply(content=f"{thought}\n\n```mswea_bash_command\n{command}\n```")


def with_model(config: TrialConfig, upstream: StandIn) -> TrialConfig:
    model = ModelConfig(name="policy-under-test", base_url=upstream.base_url, api_key=UPSTREAM_KEY)
    return config.model_copy(update={"model": model})


def python_less_task(make_task: MakeTask, no_python: str, test_sh: str, **kwargs: Any) -> Path:
    return make_task(
        "mini", dockerfile=f"FROM {no_python}\nWORKDIR /app\n", test_sh=test_sh,
        instruction="Write 'hello from mini' to /app/greeting.txt.\n", **kwargs,
    )  # fmt: skip


def agent_file(result: TrialResult, name: str) -> Path:
    return Path(result.trial_dir) / "logs" / "agent" / name


def listening() -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def host_agent_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trialbox-host-agent" and t.is_alive()]


async def test_mini_swe_agent_solves_a_task_on_an_image_without_python(
    config: TrialConfig, make_task: MakeTask, no_python: str
) -> None:
    task = python_less_task(make_task, no_python, GREETING_TEST)
    # The key's two halves apart, so the search does not find its own command.
    half = len(UPSTREAM_KEY) // 2
    search = (
        f"grep -rl '{UPSTREAM_KEY[:half]}''{UPSTREAM_KEY[half:]}' /app /tmp /logs /etc /root "
        "/run 2>/dev/null | wc -l; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\000' '\\n' | "
        f"grep -c '{UPSTREAM_KEY[:half]}''{UPSTREAM_KEY[half:]}'; env | grep -c '^OPENAI_'"
    )
    script = [
        action("printf 'hello from mini\\n' > greeting.txt"),
        action("command -v python3 || echo no-python; cat /app/greeting.txt"),
        action(search),
        action(DONE),
    ]
    before = listening()
    offline = config.model_copy(update={"no_internet": True})
    async with StandIn(by_turn(script, action(DONE))) as upstream:
        result = await run_trial(task, "mini-swe-agent", config=with_model(offline, upstream))
        requests = upstream.chat_requests()

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 1.0)
    assert (result.agent.termination, result.agent.exit_code) == ("exited", 0)
    assert result.usage is not None and result.usage.calls == 4
    # Every call went upstream with the upstream's key, added by the gateway on the host.
    assert all(r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}" for r in requests)
    observations = [json.dumps(r.body["messages"][-1]) for r in requests[1:]]
    assert "no-python" in observations[1] and "hello from mini" in observations[1]
    assert "<output>\\n0\\n0\\n0\\n</output>" in observations[2], observations[2]
    assert UPSTREAM_KEY not in json.dumps([r.body for r in requests])
    # The gateway's record and ATIF trajectory, and mini-swe-agent's own beside them.
    assert agent_file(result, "gateway.json").is_file()
    atif = json.loads(agent_file(result, "trajectory.json").read_text())
    assert atif["agent"]["name"] == "mini-swe-agent"
    own = json.loads(agent_file(result, "mini-swe-agent.traj.json").read_text())
    assert own["info"]["exit_status"] == "Submitted"
    assert own["info"]["config"]["environment"]["cwd"] == ""
    trial_files = "".join(p.read_text(errors="replace") for p in
                          Path(result.trial_dir).rglob("*") if p.is_file())  # fmt: skip
    assert UPSTREAM_KEY not in trial_files
    # Nothing left: no listener, no agent thread (containers: the suite's own check).
    assert listening() <= before
    assert host_agent_threads() == []


async def test_its_action_timeout_and_the_agent_timeout_both_hold(
    config: TrialConfig, make_task: MakeTask, no_python: str, tmp_path: Path
) -> None:
    agent_config = tmp_path / "mini.yaml"
    agent_config.write_text("environment:\n  timeout: 2\nagent:\n  step_limit: 50\n")
    task = python_less_task(
        make_task, no_python, NO_SLEEP_LEFT_TEST, task_toml="[agent]\ntimeout_sec = 10\n"
    )
    script = [action("sleep 30; echo late"), action("sleep 100 && echo late")]
    started = time.monotonic()
    async with StandIn(by_turn(script, action("sleep 100"))) as upstream:
        result = await run_trial(
            task, f"mini-swe-agent?config={agent_config}", config=with_model(config, upstream)
        )
        requests = upstream.chat_requests()

    assert time.monotonic() - started < 60
    # The first action was cut at its own timeout (2 s), and the agent told so.
    told = json.dumps(requests[1].body["messages"][-1])
    assert "timed out after 2 seconds" in told and "<output>\\n</output>" in told, told
    # Then the agent's timeout (10 s) stopped the loop and its running command's group.
    assert (result.agent.termination, result.agent.exit_code) == ("timeout", 124)
    assert result.error is None, result.error
    assert result.reward == 1.0  # the verifier ran, and found no sleep left
    own = json.loads(agent_file(result, "mini-swe-agent.traj.json").read_text())
    assert own["info"]["config"]["agent"]["step_limit"] == 50
    assert host_agent_threads() == []


async def test_the_model_service_killed_mid_trial_is_infra(
    config: TrialConfig, make_task: MakeTask, no_python: str
) -> None:
    task = python_less_task(make_task, no_python, GREETING_TEST)
    upstream = StandIn(by_turn([action("printf 'hello from mini\\n' > greeting.txt")],
                               action(DONE, "THOUGHT: done.")))  # fmt: skip
    await upstream.start()
    try:
        trial = run_trial(task, "mini-swe-agent", config=with_model(config, upstream))
        running = asyncio.ensure_future(trial)
        await upstream.wait_for_requests(1, wait_sec=60)
    finally:
        await upstream.stop()  # the model service goes, mid-trial
    result = await running

    assert result.status == "failure" and result.reward is None
    assert result.error is not None
    assert (result.error.category, result.error.type) == ("infra", "ModelUnavailableError")
    assert result.agent.termination == "exited"
    assert host_agent_threads() == []
