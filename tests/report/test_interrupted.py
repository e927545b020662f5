"""Trials a stopped run left without a result: interrupted, never running. A job killed with
SIGKILL reads as stopped (resume it) with its unfinished trials interrupted; once a resume
has finished it, it reads as finished, and the folders the dead run left are superseded by
the trials that ran their (task, attempt) again: counted nowhere, no bar growing."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.common.ids import new_id
from orchestrator.report.build import report_html
from orchestrator.report.disk import JobOnDisk, may_change, read_job
from orchestrator.report.model import TrialRow, job_page
from orchestrator.service.job import resume_job
from orchestrator.trials.spec import read_spec, write_spec
from tests.conftest import REPO_ROOT
from tests.jobs.helpers import make_tasks
from tests.jobs.test_kill_and_resume import kill_halfway, trialbox
from tests.jobs.test_resume import stopped_job

QUICK = "#!/bin/sh\n"
SLOW = "#!/bin/sh\nsleep 60\n"  # still working when the run is killed


def state_line(html: str) -> str:
    start = html.index('<span class="state')
    return html[html.index(">", start) + 1 : html.index("</span>", start)]


def rows_by_status(job: JobOnDisk, status: str) -> list[TrialRow]:
    return [row for row in job_page(job).rows if row.status == status]


def test_a_killed_job_reads_stopped_and_once_resumed_finished_with_no_trial_running(
    tmp_path: Path,
) -> None:
    # As the user met it: a job file, the run killed with SIGKILL while trials run, then
    # `trialbox run --resume`. The quick task ends at once; the slow ones are still working
    # when it does (and the kill comes), and are quick when they run again.
    make_tasks(tmp_path, "quick", solve_sh=QUICK)
    slow = make_tasks(tmp_path, "slow-1", "slow-2", "slow-3", solve_sh=SLOW)
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        'path = "tasks"\nbackend = "fake"\nn_concurrent = 3\njobs_dir = "jobs"\n'
        'job_name = "killed"\n'
    )
    job_dir = tmp_path / "jobs" / "killed"
    kill_halfway(trialbox("run", "-c", str(job_file)), job_dir)

    # Stopped halfway: it says so and how to finish it; what was running is interrupted.
    stopped = read_job(job_dir)
    left = {t.trial_id for t in stopped.interrupted}
    done = len(stopped.last_results)
    assert (stopped.state, stopped.locked, stopped.in_flight) == ("stopped", False, [])
    assert 1 <= done < 4 and len(left) >= 2  # slow-1 and slow-2 at least were working
    assert not any(t.rerun for t in stopped.interrupted)  # each still lacks its result
    assert {t.task_name for t in stopped.interrupted} <= {"slow-1", "slow-2", "slow-3"}
    s = job_page(stopped).summary
    assert (s.n_trials, s.n_expected, s.n_in_flight, s.n_interrupted) == (done, 4, 0, len(left))
    assert state_line(report_html([job_dir], live=False)) == (
        f"stopped · {done} of 4 done, {len(left)} interrupted — finish it with "
        f"trialbox run --resume {job_dir.resolve()}"
    )
    assert not rows_by_status(stopped, "running") and not may_change(job_dir)
    time.sleep(0.05)
    again = job_page(read_job(job_dir))  # read later: no bar has grown
    assert [r.lane for r in rows_by_status(stopped, "interrupted")] == [
        r.lane for r in again.rows if r.status == "interrupted"
    ]

    for task in slow:
        (task / "solution" / "solve.sh").write_text(QUICK)
    resumed = subprocess.run(
        trialbox("run", "--resume", str(job_dir)),
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr.decode()

    # Finished: every pair has its result; the dead run's folders are superseded.
    after = read_job(job_dir)
    assert (after.state, after.in_flight, after.pending) == ("finished", [], [])
    assert {t.trial_id for t in after.interrupted} == left  # still on disk, still unfinished
    assert all(t.rerun for t in after.interrupted)
    s = job_page(after).summary
    assert (s.n_trials, s.n_expected, s.n_in_flight, s.n_interrupted) == (4, 4, 0, 0)
    assert (s.n_interrupted_rerun, s.counts_by_status, s.n_counted) == (
        len(left),
        {"success": 4},
        4,
    )
    html = report_html([job_dir], live=False)
    assert state_line(html) == "finished · 4 of 4 trials"
    assert "--resume" not in html and "in flight" not in html
    assert 'class="st st-running"' not in html and 'class="bar ph-running"' not in html
    assert f"{len(left)} superseded by a rerun" in html
    shown = rows_by_status(after, "interrupted")
    assert {r.trial_id for r in shown} == left and all(r.rerun for r in shown)
    assert all(
        r.lane is not None and [s.phase for s in r.lane.spans] == ["interrupted"] for r in shown
    )
    assert not rows_by_status(after, "running") and not may_change(job_dir)


async def test_while_a_resume_runs_only_its_own_trials_are_in_flight(tmp_path: Path) -> None:
    stopped = await stopped_job(tmp_path)  # `d` lost its result.json: its folder is left
    job_dir = Path(stopped.job_dir)
    [lost] = [t for t in stopped.trials if t.task_name == "d"]
    dead = Path(lost.trial_dir).name
    before = {p.name for p in job_dir.iterdir()}
    seen: list[JobOnDisk] = []

    record = await resume_job(
        job_dir, n_concurrent=1, on_trial_done=lambda _: seen.append(read_job(job_dir))
    )

    assert len(seen) == 3  # b and c reran (cancelled, infra), d ran again
    assert all(s.state == "running" for s in seen)
    assert all(t.trial_id not in before for s in seen for t in s.in_flight)
    assert [[t.trial_id for t in s.interrupted] for s in seen] == [[dead]] * 3
    # Superseded once d runs again (at the latest when that rerun has its result), never
    # pending again after.
    reruns = [s.interrupted[0].rerun for s in seen]
    assert reruns[-1] and reruns == sorted(reruns)
    after = read_job(job_dir)
    assert (after.state, after.in_flight, len(after.last_results)) == ("finished", [], 5)
    assert [(t.trial_id, t.task_name, t.rerun) for t in after.interrupted] == [(dead, "d", True)]
    assert record.n_trials == 5


async def test_a_pair_interrupted_twice_is_missing_once(tmp_path: Path) -> None:
    stopped = await stopped_job(tmp_path)
    job_dir = Path(stopped.job_dir).resolve()
    [lost] = [t for t in stopped.trials if t.task_name == "d"]
    older = Path(lost.trial_dir)
    # A resume that ran d again under a new id, and was killed too: its folder as a trial
    # killed while it worked leaves it (its trial.json, its copy of the task, no logs yet).
    newer = job_dir / new_id("d")
    shutil.copytree(older / "task", newer / "task")
    spec = read_spec(older)
    assert spec is not None
    later = spec.model_copy(update={"trial_id": newer.name, "created_at": datetime.now(UTC)})
    write_spec(newer, later)

    read = read_job(job_dir)

    assert {t.trial_id: t.rerun for t in read.interrupted} == {older.name: True, newer.name: False}
    s = job_page(read).summary
    assert (s.n_trials, s.n_interrupted, s.n_interrupted_rerun) == (4, 1, 1)
    assert state_line(report_html([job_dir], live=False)) == (
        f"stopped · 4 of 5 done, 1 interrupted — finish it with trialbox run --resume {job_dir}"
    )
