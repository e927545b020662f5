"""`--agent terminus` in real containers, on an image with no Python (and no tmux): its loop on
the host, its terminal one exec with a TTY in the sandbox, its model the scripted stand-in
behind the trial's gateway, answering in the Terminus protocol's JSON."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator import ModelConfig, TrialConfig, TrialResult, run_trial
from tests.support.standin import Reply, StandIn, by_turn

pytestmark = pytest.mark.docker

MakeTask = Callable[..., Path]
# 1 when the greeting is there and no `sleep 1000` of the agent's is still running.
GREETING_AND_NOTHING_LEFT = (
    "#!/bin/sh\nleft=0\nfor f in /proc/[0-9]*/cmdline; do\n"
    "  tr '\\000' ' ' < \"$f\" 2>/dev/null | grep -q '^sleep 100' && left=1\ndone\n"
    "ok=0; grep -qx 'hello from terminus' /app/greeting.txt 2>/dev/null && ok=1\n"
    "echo $((ok * (1 - left))) > /logs/verifier/reward.txt\n"
)
NOTHING_LEFT = (
    "#!/bin/sh\nleft=0\nfor f in /proc/[0-9]*/cmdline; do\n"
    "  tr '\\000' ' ' < \"$f\" 2>/dev/null | grep -q '^sleep 100' && left=1\ndone\n"
    "echo $((1 - left)) > /logs/verifier/reward.txt\n"
)
WRITE = "echo 'hello from terminus' > /app/greeting.txt\n"


def answer(*commands: tuple[str, float], complete: bool = False, analysis: str = "") -> Reply:
    body = {
        "analysis": analysis or "the screen as it is",
        "plan": "the next step",
        "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
        "task_complete": complete,
    }
    return Reply(content=json.dumps(body))


DONE = answer(complete=True, analysis="done")


def with_model(config: TrialConfig, upstream: StandIn) -> TrialConfig:
    model = ModelConfig(name="policy-under-test", base_url=upstream.base_url, api_key="sk-up")
    return config.model_copy(update={"model": model})


def python_less_task(make_task: MakeTask, no_python: str, test_sh: str, **kwargs: Any) -> Path:
    return make_task(
        "terminus", dockerfile=f"FROM {no_python}\nWORKDIR /app\n", test_sh=test_sh,
        instruction="Write 'hello from terminus' to /app/greeting.txt.\n", **kwargs,
    )  # fmt: skip


def last_user(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def host_agent_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trialbox-host-agent" and t.is_alive()]


def terminus_steps(result: TrialResult) -> list[dict[str, Any]]:
    path = Path(result.trial_dir) / "logs" / "agent" / "terminus.traj.json"
    steps: list[dict[str, Any]] = json.loads(path.read_text())["steps"]
    return steps


async def test_terminus_interrupts_a_running_program_and_solves_in_two_turns(
    config: TrialConfig, make_task: MakeTask, no_python: str
) -> None:
    task = python_less_task(make_task, no_python, GREETING_AND_NOTHING_LEFT)
    script = [
        answer(("command -v python3 tmux || echo no-python-no-tmux\n", 0.3),
               ("sleep 1000\n", 0.5)),
        answer(("C-c", 0.3), ("sleep 1001 &\n", 0.2), (WRITE, 0.3), ("cat greeting.txt\n", 0.3)),
        DONE,
        DONE,
    ]  # fmt: skip
    offline = config.model_copy(update={"no_internet": True})
    async with StandIn(by_turn(script, DONE)) as upstream:
        result = await run_trial(task, "terminus", config=with_model(offline, upstream))
        requests = upstream.chat_requests()

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 1.0)
    assert (result.agent.termination, result.agent.exit_code) == ("exited", 0)
    assert len(requests) == 4
    first = last_user(requests[1].body)
    assert "no-python-no-tmux" in first and "sleep 1000" in first, first
    second = last_user(requests[2].body)
    assert "^C" in second and "hello from terminus" in second, second
    # The first task_complete got the confirmation turn, with the screen.
    confirm = last_user(requests[3].body)
    assert "Are you sure" in confirm and "hello from terminus" in confirm, confirm
    # The gateway's trajectory, and the terminal's beside it: screens and keystrokes.
    agent_dir = Path(result.trial_dir) / "logs" / "agent"
    assert (agent_dir / "trajectory.json").is_file()
    steps = terminus_steps(result)
    assert steps[0]["source"] == "user" and "hello from terminus" in steps[0]["message"]
    keys = [c["arguments"]["keystrokes"] for c in steps[2]["tool_calls"]]
    assert keys[0] == "C-c"
    assert "hello from terminus" in steps[2]["observation"]["results"][0]["content"]
    assert host_agent_threads() == []


async def test_terminus_recovers_from_a_malformed_answer(
    config: TrialConfig, make_task: MakeTask, no_python: str
) -> None:
    task = python_less_task(make_task, no_python, GREETING_AND_NOTHING_LEFT)
    script = [Reply(content="I will now write the file."), answer((WRITE, 0.3)), DONE, DONE]
    async with StandIn(by_turn(script, DONE)) as upstream:
        result = await run_trial(task, "terminus", config=with_model(config, upstream))
        requests = upstream.chat_requests()

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 1.0)
    correction = last_user(requests[1].body)
    assert "could not be used: no JSON object" in correction, correction
    steps = terminus_steps(result)
    assert steps[1]["extra"]["terminus"]["parse_error"].startswith("no JSON object")


async def test_the_agent_timeout_holds_and_the_terminal_is_closed(
    config: TrialConfig, make_task: MakeTask, no_python: str
) -> None:
    task = python_less_task(
        make_task, no_python, NOTHING_LEFT, task_toml="[agent]\ntimeout_sec = 6\n"
    )
    script = [answer(("sleep 1000 &\n", 0.2), ("sleep 1002\n", 60.0))]
    started = time.monotonic()
    async with StandIn(by_turn(script, answer(("", 60.0)))) as upstream:
        result = await run_trial(task, "terminus", config=with_model(config, upstream))

    assert time.monotonic() - started < 60
    assert (result.agent.termination, result.agent.exit_code) == ("timeout", 124)
    assert result.error is None, result.error
    assert result.reward == 1.0  # the verifier ran, and found no sleep left
    assert host_agent_threads() == []
