"""Job folders as the report reads them: `trialbox run`'s, `trialbox serve`'s, a job still
running or one that stopped, reruns, and paths that hold no job."""

from __future__ import annotations

import fcntl
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import RolloutRequest, TrialEngine
from orchestrator.report.disk import NoJobFound, find_jobs, lock_held, may_change, read_job
from orchestrator.service.retries import Backoff
from orchestrator.trials.spec import read_spec
from tests.conftest import write_task
from tests.jobs.helpers import FlakyBackend
from tests.report.helpers import fake_config, fake_job, run_holding


async def test_a_finished_run_job_reads_as_its_job_json_says(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=2, failing=1)

    read = read_job(Path(job.job_dir))

    assert (read.job_id, read.source, read.state) == (job.job_id, "run", "finished")
    assert read.n_expected == 3 and read.config is not None
    assert sorted(r.trial_id for r in read.results) == sorted(t.trial_id for t in job.trials)
    assert {r.trial_id: r for r in read.last_results} == {t.trial_id: t for t in job.trials}
    assert read.in_flight == [] and read.notes == [] and read.locked is False
    assert read.started_at == read.config.created_at


async def test_a_serve_folder_has_results_only_and_reads_too(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "t", solve_sh="#!/bin/sh\necho ok\n")
    async with TrialEngine(config=fake_config(tmp_path), task=task, agent="oracle") as engine:
        results = []
        for rollout in ("tenant-a::r1", "tenant-a::r2"):
            await engine.submit(RolloutRequest(rollout_id=rollout))
            results.append(await engine.wait(rollout))
        # The server holds its folder's lock while it runs: it may add more at any time.
        assert read_job(tmp_path / "jobs" / engine.job_id).state == "running"
    job_dir = tmp_path / "jobs" / engine.job_id
    assert engine.job_id.startswith("serve__")
    assert not (job_dir / "job.json").exists() and not (job_dir / "config.json").exists()

    [found] = find_jobs([tmp_path / "jobs"])
    read = read_job(found)

    assert (read.job_id, read.source, read.n_expected) == (engine.job_id, "serve", None)
    assert sorted(r.rollout_id or "" for r in read.results) == ["tenant-a::r1", "tenant-a::r2"]
    assert [r.status for r in results] == ["success", "success"]
    assert read.state == "finished"  # the server let go of the lock: nothing more comes


async def test_a_job_still_running_shows_its_lock_and_its_trials_in_flight(
    tmp_path: Path,
) -> None:
    seen = []

    def done(result: object) -> None:  # called by the running job, its lock held
        seen.append(read_job(tmp_path / "jobs" / job_id))

    job_id = "live-job"
    await fake_job(
        tmp_path, passing=3, failing=0, n_concurrent=1, job_id=job_id, on_trial_done=done
    )

    assert len(seen) == 3
    assert all((s.state, s.locked, s.n_expected) == ("running", True, 3) for s in seen)
    # The first report came before the job ended (the next trial may have finished
    # meanwhile: its slot opened as soon as the first trial's result was written).
    assert 1 <= len(seen[0].results) < 3
    after = read_job(tmp_path / "jobs" / job_id)
    assert (after.state, after.locked) == ("finished", False)


async def test_a_trial_folder_without_a_result_is_in_flight_only_while_a_run_holds_the_job(
    tmp_path: Path,
) -> None:
    job = await fake_job(tmp_path, passing=2, failing=0)
    victim = Path(job.trials[0].trial_dir)
    (victim / "result.json").unlink()  # as a SIGKILL mid-trial leaves it

    with run_holding(job.job_dir):  # a run of the job is working on it
        live = read_job(Path(job.job_dir))
        live_may_change = may_change(Path(job.job_dir))
    staged = victim / "logs" / "agent" / "container_input.json"
    os.utime(staged, (1_700_000_000, 1_700_000_000))
    dead = read_job(Path(job.job_dir))  # nobody runs it: the run that made it stopped

    assert (live.state, [t.trial_id for t in live.in_flight], live.interrupted) == (
        "running", [victim.name], []
    )  # fmt: skip
    assert live_may_change
    assert (dead.state, dead.in_flight, [t.trial_id for t in dead.interrupted]) == (
        "stopped", [], [victim.name]
    )  # fmt: skip
    [left] = dead.interrupted
    spec = read_spec(victim)  # when it began is a field of its trial.json, not a file's time
    assert spec is not None and left.since == spec.created_at != staged_at(1_700_000_000)
    assert (spec.task_name, spec.attempt, spec.retry_of) == (job.trials[0].task_name, 1, None)
    assert (left.task_name, left.rerun) == (job.trials[0].task_name, False)
    assert [t.trial_id for t in dead.pending] == [victim.name]  # resume runs its pair again
    assert not may_change(Path(job.job_dir))


async def test_reruns_supersede_the_attempt_they_replace(tmp_path: Path) -> None:
    backend = FlakyBackend(lambda trial_id: ".retry" not in trial_id)
    job = await fake_job(
        tmp_path, passing=1, failing=0, backend=backend, max_retries=1,
        retry_backoff=Backoff(first_sec=0.0, max_sec=0.0),
    )  # fmt: skip

    read = read_job(Path(job.job_dir))

    assert read.superseded_by == job.superseded_by
    assert [r.trial_id for r in read.last_results] == [t.trial_id for t in job.trials]
    assert len(read.results) == 2


def test_find_jobs_takes_a_job_folder_or_a_folder_of_them_and_names_what_it_wants(
    tmp_path: Path,
) -> None:
    for name in ("b-job", "a-job"):
        (tmp_path / "jobs" / name).mkdir(parents=True)
        (tmp_path / "jobs" / name / "job.json").write_text("{}")
    (tmp_path / "jobs" / "not-a-job").mkdir()

    assert [p.name for p in find_jobs([tmp_path / "jobs"])] == ["a-job", "b-job"]
    assert [p.name for p in find_jobs([tmp_path / "jobs" / "b-job"])] == ["b-job"]
    with pytest.raises(NoJobFound, match=r"not-a-job: no job here; give a job folder"):
        find_jobs([tmp_path / "jobs" / "not-a-job"])


def test_lock_held_reads_the_kernels_table_without_locking(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    assert lock_held(lock) is False  # no lock file: no run ever held it
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert lock_held(lock) is False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert lock_held(lock) is True
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert lock_held(lock) is False
    finally:
        os.close(fd)


async def test_a_copied_job_folder_reads_its_trials_where_they_are_now(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=1, failing=0)
    moved = tmp_path / "artifact" / "copied-job"
    shutil.copytree(job.job_dir, moved)
    shutil.rmtree(job.job_dir)

    read = read_job(moved)

    assert (read.job_id, len(read.results), read.state) == (job.job_id, 1, "finished")


async def test_a_job_that_only_wrote_its_config_expects_every_pair(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=2, failing=0, attempts=2)
    started = tmp_path / "just-started"
    started.mkdir()
    shutil.copy(Path(job.job_dir) / "config.json", started / "config.json")

    read = read_job(started)

    assert (read.n_expected, read.results, read.state) == (4, [], "stopped")


def staged_at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
