"""Jobs: many trials, bounded concurrency, and the aggregate a trainer reads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import JobResult, TrialConfig, TrialResult, run_job
from orchestrator.service.job import JobRecord, pass_at_k, summarize
from orchestrator.trials.result import TrialError

REPO_ROOT = Path(__file__).resolve().parents[2]
HELLO = REPO_ROOT / "examples" / "hello-oracle"


def trial(task: str, reward: float | None, status: str = "success") -> TrialResult:
    return TrialResult(
        trial_id=f"{task}-{id(object())}",
        job_id="job",
        task_name=task,
        agent_spec="nop",
        status=status,
        reward=reward,
        rewards={} if reward is None else {"reward": reward},
        started_at=datetime.now(UTC),
        trial_dir="/nowhere",
    )


async def test_job_runs_every_attempt(config: TrialConfig, container_watch) -> None:
    done: list[str] = []
    job = await run_job(
        [HELLO],
        "oracle",
        attempts=2,
        n_concurrent=2,
        config=config,
        job_id=container_watch.job_id,
        on_trial_done=lambda r: done.append(r.trial_id),
    )

    assert job.n_trials == 2
    assert len(job.trials) == 2
    assert sorted(t.attempt for t in job.trials) == [1, 2]
    assert len({t.trial_id for t in job.trials}) == 2
    assert all(t.job_id == container_watch.job_id for t in job.trials)
    assert sorted(done) == sorted(t.trial_id for t in job.trials)
    assert job.mean_reward == 1.0
    assert job.pass_at_k == {1: 1.0, 2: 1.0}
    assert job.counts_by_status == {"success": 2}
    assert job.counts_by_error_category == {}
    job_dir = config.jobs_dir.resolve() / container_watch.job_id
    assert Path(job.job_dir) == job_dir
    written = (job_dir / "job.json").read_text()
    assert JobRecord.model_validate_json(written) == job
    old_reader = JobResult.model_validate_json(written)  # today's readers still read it
    assert (old_reader.trials, old_reader.mean_reward) == (job.trials, job.mean_reward)
    for result in job.trials:
        assert Path(result.trial_dir).parent == job_dir
        assert (Path(result.trial_dir) / "result.json").is_file()
    assert len(container_watch.created()) == 2


async def test_job_counts_failures_by_category(config: TrialConfig, make_task) -> None:
    # The agent runs; the verifier leaves no reward: a validation failure that counts 0.
    no_reward = make_task("no-reward", test_sh="#!/bin/sh\ntrue\n", solve_sh="#!/bin/sh\ntrue\n")
    job = await run_job([HELLO, no_reward], "oracle", n_concurrent=2, config=config)

    assert job.n_trials == 2
    assert job.counts_by_status == {"success": 1, "failure": 1}
    assert job.counts_by_error_category == {"validation": 1}
    assert job.mean_reward == 0.5
    assert job.pass_at_k == {1: 0.5}


async def test_job_arguments_are_checked(config: TrialConfig) -> None:
    with pytest.raises(ValueError, match="n_concurrent"):
        await run_job([HELLO], "oracle", n_concurrent=0, config=config)
    with pytest.raises(ValueError, match="attempts"):
        await run_job([HELLO], "oracle", attempts=0, config=config)
    with pytest.raises(ValueError, match="job id"):
        await run_job([HELLO], "oracle", job_id="../escape", config=config)


def test_pass_at_k_is_unbiased() -> None:
    results = [trial("a", 1.0), trial("a", 0.0), trial("a", 0.0), trial("a", 0.0)]
    scores = pass_at_k(results)
    assert scores == pytest.approx({1: 0.25, 2: 0.5, 3: 0.75, 4: 1.0})


def test_pass_at_k_averages_tasks_and_counts_missing_rewards_as_misses() -> None:
    results = [
        trial("a", 1.0),
        trial("a", 1.0),
        trial("b", 0.0),
        trial("b", None, status="failure"),
        trial("b", 1.0),
    ]
    # k goes up to the smallest number of attempts of any task (2).
    scores = pass_at_k(results)
    assert set(scores) == {1, 2}
    assert scores[1] == pytest.approx((1.0 + 1 / 3) / 2)
    assert scores[2] == pytest.approx((1.0 + (1 - 1 / 3)) / 2)


def test_pass_at_k_needs_binary_rewards() -> None:
    assert pass_at_k([trial("a", 0.5), trial("a", 1.0)]) == {}
    assert pass_at_k([]) == {}


def test_summarize_counts() -> None:
    failed = trial("b", None, status="failure")
    job = summarize("j", Path("/jobs/j"), [trial("a", 1.0), failed])
    assert job.n_trials == 2
    assert job.mean_reward == 0.5
    assert job.counts_by_status == {"success": 1, "failure": 1}
    assert summarize("j", Path("/jobs/j"), []).mean_reward is None


def test_infra_failures_and_cancellations_do_not_count() -> None:
    """They say nothing about the agent: a trainer discards them, and so do the aggregates."""
    infra = trial("a", None, status="failure")
    infra.error = TrialError(
        category="infra", phase="start", type="SandboxError", message="engine gone",
        discardable=True,
    )  # fmt: skip
    agent_miss = trial("a", None, status="failure")
    agent_miss.error = TrialError(
        category="agent", phase="agent", type="WorkflowError", message="no answer",
        discardable=False,
    )  # fmt: skip
    results = [trial("a", 1.0), infra, trial("a", None, status="cancelled"), agent_miss]

    job = summarize("j", Path("/jobs/j"), results)

    assert (job.n_trials, job.n_counted) == (4, 2)
    assert job.mean_reward == 0.5  # the success and the agent's miss
    assert pass_at_k(results) == {1: 0.5, 2: 1.0}
    assert job.counts_by_error_category == {"infra": 1, "agent": 1}


def test_a_task_that_could_not_be_used_is_never_a_scored_zero() -> None:
    """A validation failure before the agent ran (a failing Dockerfile step) is no sample;
    a verifier's bad reward after the agent ran is one, and counts 0."""
    broken = trial("broken", None, status="failure")
    broken.error = TrialError(
        category="validation", phase="image", type="TaskBuildError", message="RUN failed",
        discardable=False,
    )  # fmt: skip
    bad_reward = trial("bad-reward", None, status="failure")
    bad_reward.agent.termination = "exited"
    bad_reward.error = TrialError(
        category="validation", phase="verify", type="RewardFileError", message="empty",
        discardable=False,
    )  # fmt: skip
    job = summarize("job", Path("/nowhere"), [broken, bad_reward, trial("ok", 1.0)])
    assert job.n_trials == 3
    assert job.n_counted == 2
    assert job.mean_reward == 0.5
