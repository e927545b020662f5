"""Whole trials against the real engine: what gets scored, and how a result says so."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from container_runtime.contract import ContainerInput, ContainerResult, read_model
from orchestrator import TrialConfig, TrialResult, run_trial
from orchestrator.sandbox import sandbox_name

REPO_ROOT = Path(__file__).resolve().parents[2]
HELLO = REPO_ROOT / "examples" / "hello-oracle"
SUM = REPO_ROOT / "examples" / "sum-workflow"
SERVICE = REPO_ROOT / "examples" / "service-left-running"
SUM_WORKFLOW = f"workflow:{SUM / 'agent' / 'sum_workflow.py'}:SumWorkflow"


def logs(result: TrialResult) -> Path:
    return Path(result.trial_dir) / "logs"


async def test_oracle_solves_hello(config: TrialConfig, container_watch) -> None:
    result = await run_trial(HELLO, "oracle", config=config, job_id=container_watch.job_id)

    assert result.error is None, result.error
    assert result.status == "success"
    assert result.reward == 1.0
    assert result.rewards == {"reward": 1.0}
    assert result.agent.termination == "exited"
    assert result.agent.exit_code == 0
    assert result.timings.total > 0
    assert result.image_tag and result.image_tag.startswith("trialbox-env:")
    trial_dir = Path(result.trial_dir)
    assert trial_dir.parent.parent == config.jobs_dir.resolve()
    on_disk = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
    assert on_disk == result
    # The verifier's output is collected for humans.
    assert (logs(result) / "verifier" / "reward.txt").read_text().strip() == "1"
    assert (logs(result) / "verifier" / "test-stdout.txt").is_file()
    # One labelled container, named after the trial (and removed: see the leak check).
    assert container_watch.created() == [sandbox_name(result.trial_id, result.job_id)]


async def test_wrong_answer_is_scored_zero_not_an_error(config: TrialConfig) -> None:
    agent = "command:printf 'Hello, world!\\n' > /app/hello.txt"
    result = await run_trial(HELLO, agent, config=config)

    assert result.status == "success"
    assert result.error is None
    assert result.reward == 0.0
    assert result.agent.exit_code == 0
    verifier_out = (logs(result) / "verifier" / "test-stdout.txt").read_text()
    assert "hello.txt is missing or wrong" in verifier_out


async def test_agent_exit_code_is_recorded_and_still_scored(config: TrialConfig) -> None:
    result = await run_trial(HELLO, "command:echo oops >&2; exit 3", config=config)

    assert result.status == "success"
    assert result.reward == 0.0
    assert result.agent.termination == "exited"
    assert result.agent.exit_code == 3
    assert (logs(result) / "agent" / "stderr.txt").read_text() == "oops\n"


async def test_workflow_agent_solves_sum(config: TrialConfig) -> None:
    result = await run_trial(SUM, SUM_WORKFLOW, config=config)

    assert result.error is None, result.error
    assert result.status == "success"
    assert result.reward == 1.0
    assert result.agent.exit_code == 0
    outcome = read_model(logs(result) / "agent" / "container_result.json", ContainerResult)
    assert outcome.status == "success"
    assert outcome.output == {"sum": 50, "count": 5}
    trajectory = json.loads((logs(result) / "agent" / "trajectory.json").read_text())
    assert "The sum is 50." in json.dumps(trajectory)


async def test_grader_uses_the_label(config: TrialConfig) -> None:
    result = await run_trial(SUM, SUM_WORKFLOW, config=config, metadata={"label": 51})

    assert result.status == "success"
    assert result.reward == 0.0
    assert json.loads((Path(result.trial_dir) / "task" / "tests" / "label.json").read_text()) == 51


async def test_failing_workflow_still_reports(config: TrialConfig, tmp_path: Path) -> None:
    message = f"workflow exploded {uuid.uuid4().hex}"
    source = tmp_path / "boom_workflow.py"
    source.write_text(
        textwrap.dedent(
            f"""
            from container_runtime import AgentWorkflow

            class Boom(AgentWorkflow):
                async def run(self, ctx):
                    raise RuntimeError({message!r})
            """
        )
    )
    result = await run_trial(SUM, f"workflow:{source}:Boom", config=config)

    outcome = read_model(logs(result) / "agent" / "container_result.json", ContainerResult)
    assert outcome.status == "failure"
    assert outcome.error == message
    assert outcome.error_type == "RuntimeError"
    assert result.agent.termination == "exited"
    assert result.agent.exit_code == 1
    # Nothing was solved, and the trial is scored as such; the failure is kept as a warning.
    assert result.status == "success"
    assert result.reward == 0.0
    assert result.error is None
    assert any(message in w and "RuntimeError" in w for w in result.warnings)


async def test_failing_workflow_without_a_reward_is_an_agent_error(
    config: TrialConfig, make_task, tmp_path: Path
) -> None:
    """When nothing is scored, the cause recorded is the workflow, not the missing reward."""
    message = f"no model answered {uuid.uuid4().hex}"
    source = tmp_path / "down_workflow.py"
    source.write_text(
        "from container_runtime import AgentWorkflow\n\n"
        "class Down(AgentWorkflow):\n"
        "    async def run(self, ctx):\n"
        f"        raise ConnectionError({message!r})\n"
    )
    task = make_task("needs-output", test_sh="#!/bin/sh\ntest -f /app/out && echo 1 > "
                     "/logs/verifier/reward.txt\nexit 0\n")  # fmt: skip

    result = await run_trial(task, f"workflow:{source}:Down", config=config)

    assert result.status == "failure"
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("agent", "agent")
    assert result.error.type == "WorkflowError"
    assert message in result.error.message and "ConnectionError" in result.error.message
    assert not result.error.discardable


async def test_service_left_running_answers_the_verifier(config: TrialConfig) -> None:
    result = await run_trial(SERVICE, "oracle", config=config)

    assert result.error is None, result.error
    assert result.status == "success"
    assert result.reward == 1.0


async def test_nop_agent_scores_zero(config: TrialConfig) -> None:
    result = await run_trial(SERVICE, "nop", config=config)

    assert result.status == "success"
    assert result.reward == 0.0
    verifier_out = (logs(result) / "verifier" / "test-stdout.txt").read_text()
    assert "no answer from the server" in verifier_out


async def test_container_input_reaches_the_agent(config: TrialConfig) -> None:
    result = await run_trial(
        HELLO, "command:true", config=config, metadata={"difficulty": "easy", "label": "x"}
    )

    staged = read_model(logs(result) / "agent" / "container_input.json", ContainerInput)
    assert staged.trial_id == result.trial_id
    assert staged.instruction == (HELLO / "instruction.md").read_text()
    assert staged.metadata == {"difficulty": "easy"}
    assert staged.credentials_ref is None


@pytest.mark.parametrize(
    ("test_sh", "file_named"),
    [
        ("printf '{\"reward\": ' > /logs/verifier/reward.json", "/logs/verifier/reward.json"),
        ("echo nan > /logs/verifier/reward.txt", "/logs/verifier/reward.txt"),
        ("echo 'I forgot to write a reward'", "neither reward.json nor reward.txt"),
    ],
    ids=["malformed-json", "nan-txt", "no-file"],
)
async def test_unusable_reward_is_a_validation_failure(
    config: TrialConfig, make_task, test_sh: str, file_named: str
) -> None:
    task = make_task("bad-reward", test_sh=f"#!/bin/sh\n{test_sh}\n")
    result = await run_trial(task, "nop", config=config)

    assert result.status == "failure"
    assert result.reward is None
    assert result.rewards == {}
    assert result.error is not None
    assert result.error.category == "validation"
    assert result.error.phase == "verify"
    assert result.error.type == "RewardFileError"
    assert not result.error.discardable
    assert file_named in result.error.message


async def test_a_verifier_that_crashed_before_its_reward_says_where_to_look(
    config: TrialConfig, make_task
) -> None:
    crash = "python3 -c \"open('/app/numbers.txt')\""
    task = make_task("crashes", test_sh=f"#!/bin/sh\necho checking\n{crash}\n")
    result = await run_trial(task, "nop", config=config)

    assert result.error is not None and result.error.type == "RewardFileError"
    message = result.error.message
    assert "neither reward.json nor reward.txt; tests/test.sh exited 1" in message
    assert "logs/verifier/test-stdout.txt" in message
    assert "FileNotFoundError" in message  # the last line it printed


async def test_reward_json_wins_and_names_many_rewards(config: TrialConfig, make_task) -> None:
    test_sh = (
        "#!/bin/sh\n"
        "echo 0 > /logs/verifier/reward.txt\n"
        'echo \'{"reward": 0.5, "style": 1}\' > /logs/verifier/reward.json\n'
    )
    result = await run_trial(make_task("two", test_sh=test_sh), "nop", config=config)

    assert result.status == "success"
    assert result.rewards == {"reward": 0.5, "style": 1.0}
    assert result.reward == 0.5


async def test_verifier_timeout_is_a_verifier_failure(config: TrialConfig, make_task) -> None:
    task = make_task(
        "slow-verifier",
        task_toml="[verifier]\ntimeout_sec = 1\n",
        test_sh="#!/bin/sh\nsleep 30\necho 1 > /logs/verifier/reward.txt\n",
    )
    result = await run_trial(task, "nop", config=config)

    assert result.status == "failure"
    assert result.error is not None
    assert result.error.category == "verifier"
    assert result.error.phase == "verify"
    assert result.reward is None


async def test_a_failing_dockerfile_step_is_a_validation_failure(
    config: TrialConfig, make_task
) -> None:
    """A RUN step of the task's own Dockerfile that fails is the task's fault: retrying
    cannot help, so it is not discardable infra."""
    marker = uuid.uuid4().hex
    task = make_task(
        "unbuildable",
        dockerfile=f"FROM python:3.11-slim-bookworm\nRUN echo {marker} && exit 7\n",
    )
    result = await run_trial(task, "nop", config=config)

    assert result.status == "failure"
    assert result.error is not None
    assert result.error.category == "validation"
    assert result.error.phase == "image"
    assert result.error.type == "TaskBuildError"
    assert not result.error.discardable
    assert result.agent.termination is None
    assert (Path(result.trial_dir) / "result.json").is_file()


async def test_verifier_exit_code_124_is_not_a_timeout(config: TrialConfig, make_task) -> None:
    task = make_task(
        "exit-124", test_sh="#!/bin/sh\necho 1 > /logs/verifier/reward.txt\nexit 124\n"
    )
    result = await run_trial(task, "nop", config=config)

    assert result.error is None, result.error
    assert result.reward == 1.0
