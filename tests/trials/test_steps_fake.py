"""Multi-step tasks (`[[steps]]`, trials/steps.py) through the fake backend: the steps' order in
one sandbox, the gate, the reward strategies, a step's timeout, and what one step can and
cannot leave for the next (no label, no reward). Docker's side is
tests/scenarios/test_multi_step_docker.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Limits, TrialConfig, TrialResult, run_trial
from orchestrator.backends.fake import ExecCall, FakeBackend, FakeSandbox
from orchestrator.common.errors import TaskError
from orchestrator.tasks.task import load_task
from orchestrator.trials.agents import NopAgent
from orchestrator.trials.context import plan_context
from orchestrator.trials.result import StepResult
from orchestrator.trials.session import open_session
from orchestrator.trials.steps import combined_rewards, gate_failure
from orchestrator.trials.trial import Trial
from tests.conftest import write_task

QUICK = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)


def fake_config(tmp_path: Path) -> TrialConfig:
    return TrialConfig(jobs_dir=tmp_path / "jobs", backend={"type": "fake"}, limits=QUICK)


def reward_sh(value: str) -> str:
    return f"#!/bin/sh\necho {value} > /logs/verifier/reward.txt\n"


def steps_task(
    tmp_path: Path,
    steps: dict[str, dict[str, str]],
    *,
    head: str = "",
    tables: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """A multi-step task: `steps` maps each step's name to its files (relative to its
    folder); `tables` adds TOML lines under a step's [[steps]] table."""
    toml = head + '[agent]\ntimeout_sec = 30\n[environment]\nworkdir = "/app"\n'
    contents: dict[str, str] = dict(files or {})
    for name, own in steps.items():
        toml += f'[[steps]]\nname = "{name}"\n{(tables or {}).get(name, "")}'
        contents[f"steps/{name}/instruction.md"] = f"do {name}\n"
        contents.update({f"steps/{name}/{path}": text for path, text in own.items()})
    folder = write_task(tmp_path / "tasks", "multi", task_toml=toml, files=contents)
    (folder / "instruction.md").unlink()  # a multi-step task needs none
    (folder / "tests" / "test.sh").unlink()
    return folder


def step_of(sandbox: FakeSandbox) -> str:
    """The step the agent is in: its instruction, as the agent reads it."""
    return sandbox.path("/logs/agent/instruction.md").read_bytes().decode().split()[-1]


def children(sandbox: FakeSandbox, folder: str) -> list[str]:
    """The names directly in `folder` of the fake sandbox."""
    return sorted(entry.name for entry in sandbox.path(folder).iterdir())


def views(result: TrialResult) -> list[tuple[str, float | None, bool | None]]:
    return [(s.name, s.reward, s.gate_passed) for s in result.steps]


async def test_three_steps_run_in_one_sandbox_and_a_gate_stops_them_at_step_two(
    tmp_path: Path,
) -> None:
    steps = {
        name: {"tests/test.sh": reward_sh(r), "solution/solve.sh": f"echo {name} > /app/{name}\n"}
        for name, r in (("one", "1"), ("two", "0.25"), ("three", "1"))
    }
    gates = {"one": "min_reward = 1.0\n", "two": "min_reward = 0.5\n"}
    task = steps_task(tmp_path, steps, tables=gates)
    backend = FakeBackend(QUICK)

    result = await run_trial(task, "oracle", config=fake_config(tmp_path), backend=backend)

    assert result.error is None, result.error
    assert views(result) == [("one", 1.0, True), ("two", 0.25, False)]
    # Harbor's meaning: the trial is scored over the steps that ran (mean, by default).
    assert (result.status, result.rewards) == ("success", {"reward": 0.625})
    assert any("'three'" in w and "min_reward" in w for w in result.warnings), result.warnings
    sandbox = backend.created[0]
    assert len(backend.created) == 1  # one sandbox for every step
    assert sandbox.path("/app/one").read_bytes() == b"one\n"  # each step ran its own solution
    assert sandbox.path("/app/two").read_bytes() == b"two\n"
    assert not sandbox.path("/app/three").exists()
    trial_dir = Path(result.trial_dir)
    for name, reward in (("one", "1"), ("two", "0.25")):
        assert (trial_dir / "steps" / name / "agent" / "instruction.md").read_text() == (
            f"do {name}\n"
        )
        assert (trial_dir / "steps" / name / "verifier" / "reward.txt").read_text() == (
            f"{reward}\n"
        )
    assert not (trial_dir / "steps" / "three").exists()
    on_disk = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
    assert on_disk.steps == result.steps
    assert all(s.timings.verify > 0 and s.finished_at is not None for s in result.steps)


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("", {"reward": 0.5, "style": 0.25}),  # none given: mean, a key a step lacks counts 0
        ('multi_step_reward_strategy = "mean"\n', {"reward": 0.5, "style": 0.25}),
        ('multi_step_reward_strategy = "final"\n', {"reward": 0.0}),
    ],
)
async def test_the_trial_s_rewards_follow_the_strategy(
    tmp_path: Path, strategy: str, expected: dict[str, float]
) -> None:
    first = '#!/bin/sh\necho \'{"reward": 1, "style": 0.5}\' > /logs/verifier/reward.json\n'
    task = steps_task(
        tmp_path,
        {"first": {"tests/test.sh": first}, "last": {"tests/test.sh": reward_sh("0")}},
        head=strategy,
    )

    result = await run_trial(task, "nop", config=fake_config(tmp_path), backend=FakeBackend(QUICK))

    assert result.error is None, result.error
    assert [s.rewards for s in result.steps] == [{"reward": 1.0, "style": 0.5}, {"reward": 0.0}]
    assert result.rewards == expected


async def test_a_step_whose_agent_times_out_is_still_verified_and_the_next_step_runs(
    tmp_path: Path,
) -> None:
    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        step = step_of(sandbox)
        if step == "slow":
            await call.sh("sleep 30")  # past its step's 1 s
        await call.sh(f"echo done > /app/{step}")
        return 0

    check = "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"
    task = steps_task(
        tmp_path,
        {"slow": {"tests/test.sh": check}, "quick": {"tests/test.sh": check}},
        tables={"slow": "[steps.agent]\ntimeout_sec = 1\n"},
    )
    backend = FakeBackend(QUICK, agent=agent)

    result = await run_trial(task, "nop", config=fake_config(tmp_path), backend=backend)

    assert result.error is None, result.error
    assert [s.agent.termination for s in result.steps] == ["timeout", "exited"]
    assert [s.rewards for s in result.steps] == [{"reward": 1.0}, {"reward": 1.0}]
    assert not backend.created[0].path("/app/slow").exists()  # stopped at its timeout
    assert backend.created[0].path("/app/quick").read_bytes() == b"done\n"
    assert result.status == "success"


async def test_a_reward_written_before_a_step_s_verifier_never_counts(tmp_path: Path) -> None:
    """The agent writes the reward files in step one, and again in step two (for step two's
    verifier, which writes none): emptied before each verifier, they score nothing."""

    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        await call.sh("echo 1 > /logs/verifier/reward.txt")
        return await call.sh("echo '{\"reward\": 1}' > /logs/verifier/reward.json")

    task = steps_task(
        tmp_path,
        {
            "one": {"tests/test.sh": reward_sh("0.5")},
            "two": {"tests/test.sh": "#!/bin/sh\necho wrote nothing\n"},
        },
    )

    result = await run_trial(
        task, "nop", config=fake_config(tmp_path), backend=FakeBackend(QUICK, agent=agent)
    )

    assert result.steps[0].rewards == {"reward": 0.5}  # its verifier's, not the agent's 1
    assert result.error is not None
    assert (result.error.type, result.error.category) == ("RewardFileError", "validation")
    assert "step 'two'" in result.error.message
    assert "steps/two/verifier/test-stdout.txt" in result.error.message
    assert result.steps[1].error is not None and result.steps[1].rewards == {}
    # A step that failed to score ends the trial unscored, in its category.
    assert (result.status, result.rewards, result.reward) == ("failure", {}, None)


async def test_no_step_s_agent_finds_the_tests_the_label_or_an_earlier_reward(
    tmp_path: Path,
) -> None:
    seen: dict[str, Any] = {}

    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        step = step_of(sandbox)
        seen[step] = {
            "tests": sandbox.path("/tests").exists(),
            "verifier": children(sandbox, "/logs/verifier"),
            "relay": children(sandbox, "/logs/agent/.relay"),
        }
        return 0

    async def verifier(sandbox: FakeSandbox, call: ExecCall) -> int:
        label = json.loads(sandbox.path("/tests/label.json").read_bytes())
        helper = sandbox.path("/tests/helper.txt").read_bytes().decode().strip()
        own = sandbox.path("/tests/own.txt").read_bytes().decode().strip()
        return await call.sh(f"echo {label['answer']} > /logs/verifier/{helper}-{own}.txt; "
                             "echo 1 > /logs/verifier/reward.txt")  # fmt: skip

    task = steps_task(
        tmp_path,
        {name: {"tests/test.sh": "", "tests/own.txt": name} for name in ("one", "two")},
        files={"tests/helper.txt": "shared\n"},
    )
    backend = FakeBackend(QUICK, agent=agent, verifier=verifier)

    result = await run_trial(
        task, "nop", config=fake_config(tmp_path), backend=backend,
        metadata={"label": {"answer": 42}},
    )  # fmt: skip

    assert result.error is None, result.error
    assert seen["one"]["tests"] is False and seen["two"]["tests"] is False
    assert seen["two"]["verifier"] == []  # step one's reward was emptied before step two
    assert len(seen["two"]["relay"]) == 1  # /logs/agent is the step's own: no step one pid
    trial_dir = Path(result.trial_dir)
    # The task's tests/ merged with each step's own, at that step's verify time only.
    assert (trial_dir / "steps/one/verifier/shared-one.txt").read_text() == "42\n"
    assert (trial_dir / "steps/two/verifier/shared-two.txt").read_text() == "42\n"


async def test_a_step_s_workdir_setup_healthcheck_user_and_verifier_env(tmp_path: Path) -> None:
    steps = {
        "first": {"tests/test.sh": reward_sh("1")},
        "second": {
            "workdir/config.txt": "Harbor\n",
            "workdir/setup.sh": "echo ran > /tmp/setup-ran\n",  # as nobody: /app is root's
            "tests/test.sh": "#!/bin/sh\necho $WANT > /logs/verifier/reward.txt\n",
        },
    }
    tables = {
        "second": (
            '[steps.agent]\nuser = "nobody"\n'
            '[steps.verifier]\ntimeout_sec = 5\n[steps.verifier.env]\nWANT = "0.75"\n'
            '[steps.healthcheck]\ncommand = "cat /tmp/setup-ran"\ninterval_sec = 0.1\n'
        )
    }
    task = steps_task(tmp_path, steps, tables=tables)
    users: dict[str, str] = {}

    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        users[step_of(sandbox)] = call.user.name
        return 0

    backend = FakeBackend(QUICK, agent=agent)
    result = await run_trial(task, "nop", config=fake_config(tmp_path), backend=backend)

    assert result.error is None, result.error
    assert [s.rewards for s in result.steps] == [{"reward": 1.0}, {"reward": 0.75}]
    assert users == {"first": "root", "second": "nobody"}
    sandbox = backend.created[0]
    assert sandbox.path("/app/config.txt").read_bytes() == b"Harbor\n"
    assert sandbox.path("/tmp/setup-ran").read_bytes() == b"ran\n"
    assert result.steps[1].timings.setup > 0


async def test_a_step_s_failed_healthcheck_ends_the_trial_naming_the_step(tmp_path: Path) -> None:
    check = '[steps.healthcheck]\ncommand = "cat /app/missing"\ninterval_sec = 0.1\nretries = 1\n'
    task = steps_task(
        tmp_path,
        {"one": {"tests/test.sh": reward_sh("1")}, "two": {"tests/test.sh": reward_sh("1")}},
        tables={"two": check},
    )

    result = await run_trial(task, "nop", config=fake_config(tmp_path), backend=FakeBackend(QUICK))

    assert result.error is not None
    assert (result.error.type, result.error.category) == ("HealthcheckFailedError", "validation")
    assert "steps[1].healthcheck" in result.error.message
    assert [s.name for s in result.steps] == ["one", "two"]
    assert result.steps[1].error is not None and result.steps[1].agent.termination is None
    assert result.status == "failure"


async def test_a_rollout_prompt_is_refused_for_a_multi_step_task(tmp_path: Path) -> None:

    task = steps_task(tmp_path, {"one": {"tests/test.sh": reward_sh("1")}})
    trial = Trial(
        load_task(task), NopAgent("nop"), config=fake_config(tmp_path),
        backend=FakeBackend(QUICK), trial_id="t1", job_id="j1", metadata={}, attempt=1,
        prompt="something else",
    )  # fmt: skip

    result = await trial.run()

    assert result.error is not None and result.error.category == "validation"
    assert "prompt" in result.error.message and result.status == "failure"


def test_the_gate_and_the_strategies_as_rules() -> None:
    assert gate_failure({"reward": 1.0}, {"reward": 1.0}) is None
    assert gate_failure({"reward": 0.5}, {"reward": 1.0}) == (
        "reward = 0.5 is below its min_reward 1"
    )
    assert gate_failure({"a": 1.0}, {"a": 0.5, "b": 0.0}) == "b is missing (min_reward 0)"
    made = [
        StepResult(name=n, rewards=r, started_at="2026-01-01T00:00:00Z")
        for n, r in (("a", {"x": 1.0}), ("b", {"y": 1.0}))
    ]
    assert combined_rewards(made, None) == {"x": 0.5, "y": 0.5}
    assert combined_rewards(made, "final") == {"y": 1.0}
    assert combined_rewards([], "mean") == {}


async def test_an_abort_in_step_two_ends_the_trial_cancelled_with_no_step_after_it(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()

    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        if step_of(sandbox) == "two":
            started.set()
            await asyncio.Event().wait()
        return 0

    task = steps_task(
        tmp_path, {name: {"tests/test.sh": reward_sh("1")} for name in ("one", "two", "three")}
    )
    backend = FakeBackend(QUICK, agent=agent)
    trial = asyncio.ensure_future(
        run_trial(task, "nop", config=fake_config(tmp_path), backend=backend)
    )
    await asyncio.wait_for(started.wait(), 10)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial

    [trial_dir] = list((tmp_path / "jobs").glob("*/*"))
    result = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
    assert result.status == "cancelled" and result.rewards == {}
    assert [s.name for s in result.steps] == ["one", "two"]
    assert result.steps[0].rewards == {"reward": 1.0}
    assert result.steps[1].agent.termination == "aborted"
    assert result.steps[1].error == "the trial was cancelled in this step"
    assert backend.created[0].destroyed
    assert await backend.find_leftovers(job=result.job_id) == []


async def test_a_step_whose_oracle_has_no_solution_ends_the_trial_and_never_ran(
    tmp_path: Path,
) -> None:
    task = steps_task(
        tmp_path,
        {
            "one": {"tests/test.sh": reward_sh("1"), "solution/solve.sh": "echo one\n"},
            "two": {"tests/test.sh": reward_sh("1")},  # no solution here, none in the task
        },
    )

    result = await run_trial(task, "oracle", config=fake_config(tmp_path))

    assert result.error is not None and result.error.category == "validation"
    assert "solution/solve.sh: missing" in result.error.message
    assert result.steps[0].agent.termination == "exited"
    assert result.steps[1].agent.termination is None  # not step one's ending
    assert result.status == "failure"


async def test_a_session_of_a_multi_step_task_is_refused_before_any_sandbox(
    tmp_path: Path,
) -> None:

    task = steps_task(tmp_path, {"one": {"tests/test.sh": reward_sh("1")}})
    backend = FakeBackend(QUICK)
    with pytest.raises(TaskError, match=r"multi-step task \(\[\[steps\]\]\) cannot be run as a"):
        await open_session(
            load_task(task), config=fake_config(tmp_path), backend=backend, job_id="job-s",
            session_id="s-1",
        )  # fmt: skip
    assert backend.created == []


async def test_the_grading_hook_fires_once_for_a_multi_step_trial(tmp_path: Path) -> None:
    task = steps_task(
        tmp_path, {name: {"tests/test.sh": reward_sh("1")} for name in ("one", "two", "three")}
    )
    fired: list[str] = []
    trial = Trial(
        load_task(task), NopAgent("nop"), config=fake_config(tmp_path),
        backend=FakeBackend(QUICK), trial_id="t1", job_id="j1", metadata={}, attempt=1,
        on_grading=lambda t: fired.append(t.result.steps[-1].name),
    )  # fmt: skip

    result = await trial.run()

    assert result.error is None and len(result.steps) == 3
    assert fired == ["one"]  # the rollout's workflow_complete callback, not one per step


async def test_a_step_s_verifier_cut_off_by_no_internet_is_infra_not_a_zero(
    tmp_path: Path,
) -> None:
    offline = "#!/bin/sh\necho 'curl: (6) Could not resolve host: tools.example.com'\n" + (
        "echo 0 > /logs/verifier/reward.txt\n"
    )
    task = steps_task(
        tmp_path, {"one": {"tests/test.sh": reward_sh("1")}, "two": {"tests/test.sh": offline}}
    )
    config = fake_config(tmp_path).model_copy(update={"no_internet": True})

    result = await run_trial(task, "nop", config=config, backend=FakeBackend(QUICK))

    assert result.error is not None
    assert (result.error.type, result.error.category) == ("VerifierOfflineError", "infra")
    assert result.steps[1].rewards == {} and result.rewards == {}
    assert any("step 'two': the reward its verifier wrote, not kept" in w for w in result.warnings)


async def test_each_step_copies_the_task_s_and_its_own_artifacts_into_its_folder(
    tmp_path: Path,
) -> None:
    """As Harbor collects them: after the step's agent, before its verifier, the task's
    `artifacts` and the step's own, into `<trial>/steps/<name>/artifacts/`."""
    steps = {
        name: {"tests/test.sh": reward_sh("1"),
               "solution/solve.sh": f"echo {name} > /app/{name}.txt\necho {name} > /app/log.txt\n"}
        for name in ("one", "two")
    }  # fmt: skip
    own = {"one": 'artifacts = ["/app/one.txt"]\n', "two": 'artifacts = ["/app/two.txt"]\n'}
    task = steps_task(tmp_path, steps, head='artifacts = ["/app/log.txt"]\n', tables=own)

    result = await run_trial(task, "oracle", config=fake_config(tmp_path))

    assert result.error is None, result.error
    trial_dir = Path(result.trial_dir)
    for name in ("one", "two"):
        (step,) = [s for s in result.steps if s.name == name]
        assert [(a.source, a.files) for a in step.artifacts] == [
            ("/app/log.txt", 1), (f"/app/{name}.txt", 1),
        ]  # fmt: skip
        folder = trial_dir / "steps" / name / "artifacts" / "app"
        assert (folder / "log.txt").read_text() == f"{name}\n"  # this step's, not the last's
        assert (folder / f"{name}.txt").read_text() == f"{name}\n"
    assert not (trial_dir / "artifacts").exists()  # copied per step only


async def test_a_step_verifier_s_host_values_are_secrets(tmp_path: Path) -> None:
    """`${VAR}` in `[steps.verifier.env]` comes from the host, so it is scrubbed like the
    task's own `[verifier.env]`."""
    secret = "s3cr3t-value-from-the-host-0042"
    tables = {"one": '[steps.verifier.env]\nTOKEN = "${STEP_TOKEN}"\n'}
    task = load_task(
        steps_task(tmp_path, {"one": {"tests/test.sh": reward_sh("1")}}, tables=tables)
    )
    capabilities = await FakeBackend(QUICK).capabilities()
    context = plan_context(
        task, fake_config(tmp_path), capabilities, backend_name="fake",
        environ={"STEP_TOKEN": secret},
    )  # fmt: skip
    assert context.step_verifier_env["one"]["TOKEN"] == secret
    assert secret in context.host_values


async def test_every_step_s_agent_finds_the_mcp_servers(tmp_path: Path) -> None:
    """/logs/agent is emptied between steps; the MCP configuration is written again."""
    steps = {
        n: {"tests/test.sh": reward_sh("1"), "solution/solve.sh": "true\n"} for n in ("a", "b")
    }
    head = '[[environment.mcp_servers]]\nname = "s"\ntransport = "stdio"\ncommand = "srv"\n'
    task = steps_task(tmp_path, steps, head=head)

    result = await run_trial(task, "oracle", config=fake_config(tmp_path))

    assert result.error is None, result.error
    for name in ("a", "b"):
        assert (Path(result.trial_dir) / "steps" / name / "agent" / "mcp.json").is_file()
