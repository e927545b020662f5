"""The agent's framework timeout: the leader is stopped, the sandbox kept, the trial scored."""

from __future__ import annotations

import textwrap
from pathlib import Path

from container_runtime.contract import ContainerResult, read_model
from orchestrator import Limits, TrialConfig, run_trial

REPO_ROOT = Path(__file__).resolve().parents[2]
SUM = REPO_ROOT / "examples" / "sum-workflow"
SERVICE_TEST = (REPO_ROOT / "examples" / "service-left-running" / "tests" / "test.sh").read_text()
SHORT = "[agent]\ntimeout_sec = 2\n"
# Python and the runtime must be up (its SIGTERM handler installed) before the timeout: a
# few seconds leave a busy machine room for that.
WORKFLOW_TIMEOUT = "[agent]\ntimeout_sec = 5\n"
# The example's verifier asks once; on a busy machine the server may still be starting when
# the verifier runs, so this one waits (bounded) until it answers first. A server that was
# stopped never answers, and the example's check then scores 0.
UNTIL_SERVED = (
    "#!/bin/sh\n"
    "for _ in $(seq 200); do\n"
    "  python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ping')\""
    " 2>/dev/null && break\n"
    "  sleep 0.1\n"
    "done\n"
)


async def test_timed_out_agent_is_still_verified(config: TrialConfig, make_task) -> None:
    task = make_task(
        "slow", task_toml=SHORT, test_sh="#!/bin/sh\necho 0.25 > /logs/verifier/reward.txt\n"
    )
    result = await run_trial(task, "command:sleep 60", config=config)

    assert result.agent.termination == "timeout"
    assert result.error is None, result.error
    assert result.status == "success"
    assert result.reward == 0.25
    # Bounded by the task's timeout, not by the agent's 60 s (a loose sanity bound only).
    assert result.agent.duration_sec < 30


async def test_leader_ignoring_term_is_killed_and_still_scored(
    config: TrialConfig, make_task
) -> None:
    config = config.model_copy(update={"limits": Limits(stop_term_grace_sec=0.5)})
    task = make_task(
        "stubborn", task_toml=SHORT, test_sh="#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"
    )
    result = await run_trial(
        task, "command:trap '' TERM; while :; do sleep 0.1; done", config=config
    )

    assert result.agent.termination == "timeout"
    assert "KILL" in result.agent.detail
    assert result.status == "success"
    assert result.reward == 1.0


async def test_server_started_before_the_timeout_still_answers(
    config: TrialConfig, make_task
) -> None:
    # Only the agent's leader is stopped at the timeout, not what it left running.
    test_sh = UNTIL_SERVED + SERVICE_TEST.removeprefix("#!/bin/sh\n")
    task = make_task("service-then-hang", task_toml=SHORT, test_sh=test_sh)
    agent = (
        "command:mkdir -p /srv/www && printf pong > /srv/www/ping && "
        "(nohup python3 -m http.server 8000 --directory /srv/www >/tmp/server.log 2>&1 &) ; "
        "sleep 60"
    )
    result = await run_trial(task, agent, config=config)

    assert result.agent.termination == "timeout"
    assert result.status == "success"
    assert result.reward == 1.0


async def test_timed_out_workflow_still_writes_its_result(
    config: TrialConfig, make_task, tmp_path: Path
) -> None:
    source = tmp_path / "slow_workflow.py"
    source.write_text(
        textwrap.dedent(
            """
            import asyncio
            from container_runtime import AgentWorkflow

            class Slow(AgentWorkflow):
                async def run(self, ctx):
                    await asyncio.sleep(3600)
            """
        )
    )
    task = make_task(
        "slow-sum",
        task_toml=WORKFLOW_TIMEOUT,
        dockerfile=(SUM / "environment" / "Dockerfile").read_text(),
        files={
            "environment/numbers.txt": (SUM / "environment" / "numbers.txt").read_text(),
            "tests/grader.py": (SUM / "tests" / "grader.py").read_text(),
        },
        test_sh=(SUM / "tests" / "test.sh").read_text(),
    )
    result = await run_trial(task, f"workflow:{source}:Slow", config=config)

    assert result.agent.termination == "timeout"
    outcome = read_model(
        Path(result.trial_dir) / "logs" / "agent" / "container_result.json", ContainerResult
    )
    assert outcome.status == "failure"
    assert outcome.error_type == "Terminated"
    assert "SIGTERM" in (outcome.error or "")
    assert result.status == "success"
    assert result.reward == 0.0
