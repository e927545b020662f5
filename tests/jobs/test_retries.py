"""--max-retries: a trial that ends in infra runs again under a new trial id; every attempt
is kept, the last one counts; agent, verifier and validation failures are never retried."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from orchestrator import TrialResult
from orchestrator.service.job import JobRecord, run_job
from orchestrator.service.retries import Backoff
from tests.jobs.helpers import NO_REWARD, FlakyBackend, fake_config, make_tasks, on_disk

NOW = Backoff(first_sec=0.0, max_sec=0.0)


def first_attempt(trial_id: str) -> bool:
    return ".retry" not in trial_id


async def test_an_infra_failure_is_retried_and_only_the_last_attempt_counts(
    tmp_path: Path,
) -> None:
    backend = FlakyBackend(first_attempt)
    retried: list[TrialResult] = []
    done: list[str] = []

    job = await run_job(
        make_tasks(tmp_path, "a", "b"), "nop", attempts=2, config=fake_config(tmp_path),
        backend=backend, max_retries=2, retry_backoff=NOW, on_retry=retried.append,
        on_trial_done=lambda r: done.append(r.trial_id),
    )  # fmt: skip

    assert len(backend.refused) == 4  # every first attempt hit the fault
    assert (job.n_trials, job.n_expected, job.n_counted) == (4, 4, 4)
    assert job.counts_by_status == {"success": 4}
    assert job.counts_by_error_category == {}  # the infra failures are superseded
    assert (job.mean_reward, job.pass_at_k) == (1.0, {1: 1.0, 2: 1.0})
    assert all(t.trial_id.endswith(".retry1") for t in job.trials)
    assert sorted(t.trial_id for t in job.superseded) == sorted(backend.refused)
    assert sorted(r.trial_id for r in retried) == sorted(backend.refused)
    assert len(done) == 8  # every attempt is reported
    for old in job.superseded:
        assert old.error is not None and old.error.category == "infra"
        new = job.superseded_by[old.trial_id]
        assert new == f"{old.trial_id}.retry1"
        kept = [t for t in job.trials if t.trial_id == new]
        assert [(t.task_name, t.attempt) for t in kept] == [(old.task_name, old.attempt)]
        assert b'"infra"' in on_disk(old)  # both results stay on disk
        assert Path(kept[0].trial_dir, "result.json").is_file()


async def test_retries_stop_at_max_retries(tmp_path: Path) -> None:
    backend = FlakyBackend(lambda _trial: True)

    job = await run_job(
        make_tasks(tmp_path, "a"), "nop", config=fake_config(tmp_path), backend=backend,
        max_retries=2, retry_backoff=NOW,
    )  # fmt: skip

    [last] = job.trials
    assert last.trial_id.endswith(".retry2")
    assert len(backend.refused) == 3
    assert job.counts_by_error_category == {"infra": 1}  # the last attempt's
    assert (job.n_counted, job.mean_reward) == (0, None)
    assert list(job.superseded_by.values()) == [
        job.superseded[1].trial_id,
        last.trial_id,
    ]


async def test_a_failure_that_means_something_is_never_retried(tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, "no-reward", test_sh=NO_REWARD)  # validation, after the agent
    slow = "[verifier]\ntimeout_sec = 0.2\n"
    tasks += make_tasks(tmp_path, "slow-verifier", test_sh="#!/bin/sh\nsleep 5\n", task_toml=slow)
    tasks += make_tasks(tmp_path, "ok")

    job = await run_job(
        tasks, "command:exit 3", config=fake_config(tmp_path), max_retries=3, retry_backoff=NOW
    )

    assert job.superseded == [] and job.superseded_by == {}
    assert job.counts_by_error_category == {"validation": 1, "verifier": 1}
    assert job.n_trials == 3 and job.mean_reward == 1 / 3


async def test_a_cancel_cuts_a_retry_s_backoff_short(tmp_path: Path) -> None:
    backend = FlakyBackend(lambda _trial: True)
    failed = asyncio.Event()
    job = run_job(
        make_tasks(tmp_path, "a"), "nop", config=fake_config(tmp_path), backend=backend,
        max_retries=5, retry_backoff=Backoff(first_sec=60.0, max_sec=60.0),
        on_trial_done=lambda _r: failed.set(),
    )  # fmt: skip
    work = asyncio.create_task(job)
    await asyncio.wait_for(failed.wait(), 10)
    started = time.monotonic()
    work.cancel()
    done, _ = await asyncio.wait([work], timeout=10)

    assert done and work.cancelled()
    assert time.monotonic() - started < 5  # not the 60 s backoff
    assert len(backend.refused) == 1  # no retry started after the cancel
    [job_dir] = (tmp_path / "jobs").iterdir()
    written = JobRecord.model_validate_json((job_dir / "job.json").read_text())
    assert [t.trial_id for t in written.trials] == backend.refused  # recorded all the same
