"""Jobs as their folders hold them, also while they run, for the report and the export.

Two writers make job folders. `trialbox run` writes `config.json` at the start, `job.json`
after every trial and a `result.json` per trial. `trialbox serve` (the engine's job id,
`serve__<hex>`) writes only the trials' `result.json`. The trials' own `result.json` files
are the truth: `job.json` is only their summary and may lag a trial behind, so it is read for
`n_expected` alone.

A trial folder without a `result.json` is a trial in flight, or one a run left when it
stopped (killed, crashed: nothing finishes it). In a `trialbox run` folder it is in flight only
while a run holds the folder's lock and it was started by that run (made after the run wrote
its `config.json`); any other is interrupted, and when its (task, attempt) has run again since
(a resume reruns a pair under a new trial id) it is superseded and counts nowhere. A `serve`
folder is locked by its server while it runs: its unfinished trials are in flight while the
lock is held and interrupted after; one an older trialbox's server left has no lock to tell
by, and there every such folder is in flight.

Running is told by the kernel's lock table (`lock_held`: no lock is taken); an unfinished
trial's (task, attempt) is read from its trial.json, never from its id, and one whose pair ran
again since is `rerun`. A job is finished once every pair has a result. `find_jobs` finds job
folders, `read_job` reads one as a `JobOnDisk`.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from orchestrator.jobs.config import JobConfigFile
from orchestrator.jobs.record import replaced_by
from orchestrator.jobs.results import RESULT_FILE, chains_of, read_results
from orchestrator.jobs.store import CONFIG_FILE, JOB_FILE, LOCK_FILE
from orchestrator.trials.result import TrialResult
from orchestrator.trials.spec import read_spec

# What a job folder holds besides its trials: never taken for a trial in flight.
_NOT_TRIALS = {CONFIG_FILE, JOB_FILE, LOCK_FILE}
# A trial folder gets these in its first phase (materialize), long before its result.json.
_TRIAL_MARKS = ("task", "logs")
JobState = Literal["running", "finished", "stopped", "unknown"]


class Unfinished(BaseModel):
    """A trial folder without a result.json: running now, or left by a run that stopped."""

    trial_id: str
    trial_dir: Path
    since: datetime = Field(
        description="When it began (its trial.json), else when its folder got its staged input."
    )
    task_name: str | None = Field(None, description="Its task, from its trial.json (None: none).")
    attempt: int | None = Field(None, description="Its attempt, from its trial.json.")
    until: datetime | None = Field(
        None,
        description="Interrupted: the last sign its run was alive (that run's last result "
        "after this trial began, else its own start): it ran at least that long.",
    )
    rerun: bool = Field(
        False,
        description="Interrupted, and its (task, attempt) ran again since: superseded, it "
        "counts nowhere.",
    )


class JobOnDisk(BaseModel):
    """One job folder as read now: every result, which of them count, and what is running."""

    job_id: str
    job_dir: Path
    source: Literal["run", "serve"] = Field(
        description="run: has config.json (trialbox run); serve: results only (trialbox serve)."
    )
    config: JobConfigFile | None = None
    n_expected: int | None = Field(None, description="(task, attempt) pairs, from job.json.")
    results: list[TrialResult] = Field(
        default_factory=list, description="Every readable result.json, oldest first."
    )
    superseded_by: dict[str, str] = Field(
        default_factory=dict, description="trial id -> the rerun that replaced it."
    )
    in_flight: list[Unfinished] = Field(
        default_factory=list, description="Trials running now (no result.json yet)."
    )
    interrupted: list[Unfinished] = Field(
        default_factory=list,
        description="Trials a run left without a result.json when it stopped: never running.",
    )
    notes: list[str] = Field(default_factory=list, description="What could not be read.")
    locked: bool | None = Field(
        None, description="A trialbox run holds the folder's lock (None: cannot tell here)."
    )
    read_at: datetime

    @property
    def last_results(self) -> list[TrialResult]:
        """One result per (task, attempt): the last of each chain, as the aggregates count."""
        return [r for r in self.results if r.trial_id not in self.superseded_by]

    @property
    def started_at(self) -> datetime | None:
        """When the job (or its latest resume) began, else its first trial's start."""
        starts = [r.started_at for r in self.results]
        starts += [t.since for t in self.in_flight + self.interrupted]
        if self.config is not None:
            starts.append(self.config.created_at)
        return min(starts) if starts else None

    @property
    def pending(self) -> list[Unfinished]:
        """The interrupted trials whose (task, attempt) has not run again: what a resume
        still has to run besides the pairs no trial was started for."""
        return [t for t in self.interrupted if not t.rerun]

    @property
    def state(self) -> JobState:
        """running: a run holds the lock; finished: every (task, attempt) has a result,
        whatever folders a stopped run left; stopped: a run job left incomplete (resume it);
        a serve folder is finished once its server let go of the lock; unknown: one whose
        server held none (an older trialbox) or where locks cannot be read."""
        if self.locked:
            return "running"
        if self.source == "serve":
            if self.locked is False and (self.job_dir / LOCK_FILE).exists():
                return "finished"
            return "running" if self.in_flight else "unknown"
        done = len(self.last_results)
        if self.n_expected is None or done >= self.n_expected:
            return "finished"
        return "stopped"


class NoJobFound(ValueError):
    """The path holds no job folder: the message says what one looks like."""


def is_job_dir(path: Path) -> bool:
    """A folder `trialbox run` or `trialbox serve` made: config.json, job.json or a trial."""
    if not path.is_dir():
        return False
    if (path / CONFIG_FILE).is_file() or (path / JOB_FILE).is_file():
        return True
    return any(path.glob(f"*/{RESULT_FILE}"))


def find_jobs(paths: list[Path]) -> list[Path]:
    """The job folders named by `paths`: each a job folder, or a folder of them (its jobs
    sorted by name, which for default ids is their start time)."""
    found: list[Path] = []
    for path in paths:
        path = path.resolve()
        if is_job_dir(path):
            found.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if is_job_dir(p)) if path.is_dir() else []
        if not inside:
            raise NoJobFound(
                f"{path}: no job here; give a job folder (jobs/<job>/ with config.json, job.json "
                "or <trial>/result.json) or a folder of them (jobs/)"
            )
        found.extend(inside)
    return list(dict.fromkeys(found))


def read_job(job_dir: Path) -> JobOnDisk:
    """The job folder as it is now; a job still running reads as far as it went."""
    job_dir = job_dir.resolve()
    config = _config(job_dir)
    job_id = config.job_id if config is not None else job_dir.name
    results, notes = read_results(job_dir, job_id)
    superseded_by = replaced_by(chains_of(results))
    ordered = sorted(results, key=lambda r: (r.started_at, r.trial_id))
    locked = lock_held(job_dir / LOCK_FILE)
    unfinished = _unfinished(job_dir, {Path(r.trial_dir).name for r in results})
    if config is None and (locked is None or not (job_dir / LOCK_FILE).exists()):
        # A serve folder whose server held no lock (an older trialbox), or no telling here.
        in_flight, interrupted = unfinished, []
    elif config is None:  # a serve folder: its server holds the lock while it runs
        in_flight = unfinished if locked else []
        interrupted = [t for t in unfinished if t not in in_flight]
    else:
        # When the running run began: config.json's time, from the same clock as the folders'.
        run_began = _at(_mtime_ns(job_dir / CONFIG_FILE))
        in_flight = [t for t in unfinished if locked and t.since >= run_began]
        interrupted = [t for t in unfinished if t not in in_flight]
        _place(config, ordered, in_flight, interrupted)
    return JobOnDisk(
        job_id=job_id,
        job_dir=job_dir,
        source="run" if config is not None else "serve",
        config=config,
        n_expected=_n_expected(job_dir, config),
        results=ordered,
        superseded_by=superseded_by,
        in_flight=in_flight,
        interrupted=interrupted,
        notes=notes,
        locked=locked,
        read_at=datetime.now(UTC),
    )


def fingerprint(job_dir: Path) -> str:
    """Changes whenever a trial starts or finishes, job.json is rewritten or a run takes or
    lets go of the folder's lock (its trials without a result stop being in flight): cheap
    (stats only), so a page can ask for it every few seconds and rebuild only on a change."""
    try:
        entries = sorted(os.scandir(job_dir), key=lambda e: e.name)
    except OSError:
        return "gone"
    parts = [f"locked:{lock_held(job_dir / LOCK_FILE)}"]
    for entry in entries:
        if entry.name in (JOB_FILE, CONFIG_FILE):
            parts.append(f"{entry.name}:{_mtime_ns(Path(entry.path))}")
        elif entry.is_dir(follow_symlinks=False):
            parts.append(f"{entry.name}:{_mtime_ns(Path(entry.path) / RESULT_FILE)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def may_change(job_dir: Path) -> bool:
    """Whether the job may still change: a run holds its lock, or, in a serve folder (no
    lock to tell by), a trial folder has no result.json yet. Stats only."""
    if lock_held(job_dir / LOCK_FILE):
        return True
    if (job_dir / CONFIG_FILE).exists() or (job_dir / LOCK_FILE).exists():
        return False  # a trialbox run folder nobody runs: what it left stays as it is
    try:
        entries = list(os.scandir(job_dir))
    except OSError:
        return False
    return any(
        entry.is_dir(follow_symlinks=False)
        and not entry.name.startswith(".")
        and not os.path.exists(os.path.join(entry.path, RESULT_FILE))
        and any(os.path.isdir(os.path.join(entry.path, mark)) for mark in _TRIAL_MARKS)
        for entry in entries
    )


def lock_held(lock_file: Path) -> bool | None:
    """Whether some process holds the job folder's flock, read from /proc/locks (Linux).

    Reading the kernel's table takes no lock itself, so a viewer can never make a
    `trialbox run --resume` starting at the same moment fail with "another trialbox run
    is using this job folder" (probing with flock could). None where it cannot tell.
    """
    try:
        stat = lock_file.stat()
    except OSError:
        return False  # no run ever locked this folder (a serve folder), or it is gone
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    return any(
        " FLOCK " in line and line.split()[5:6] == [wanted]
        for line in table.splitlines()
        if "->" not in line  # a waiter, not a holder
    )


def _config(job_dir: Path) -> JobConfigFile | None:
    try:
        return JobConfigFile.model_validate_json((job_dir / CONFIG_FILE).read_bytes())
    except (OSError, ValidationError):
        return None


def _n_expected(job_dir: Path, config: JobConfigFile | None) -> int | None:
    """job.json's count of (task, attempt) pairs; before its first write, config.json's."""
    try:
        value = json.loads((job_dir / JOB_FILE).read_bytes()).get("n_expected")
    except (OSError, ValueError, AttributeError):
        value = None
    if isinstance(value, int) and value > 0:
        return value
    return len(config.tasks) * config.attempts if config is not None else None


def _unfinished(job_dir: Path, finished: set[str]) -> list[Unfinished]:
    found = []
    for entry in sorted(job_dir.iterdir()):
        if entry.name in _NOT_TRIALS or entry.name in finished or entry.name.startswith("."):
            continue
        if entry.is_symlink() or not entry.is_dir() or (entry / RESULT_FILE).exists():
            continue
        spec = read_spec(entry)
        if spec is None and not any((entry / mark).is_dir() for mark in _TRIAL_MARKS):
            continue
        staged = entry / "logs" / "agent" / "container_input.json"
        when = _at(_mtime_ns(staged) or _mtime_ns(entry))
        found.append(
            Unfinished(
                trial_id=entry.name, trial_dir=entry,
                since=spec.created_at if spec is not None else when,
                task_name=spec.task_name if spec is not None else None,
                attempt=spec.attempt if spec is not None else None,
            )
        )  # fmt: skip
    return found


def _place(
    config: JobConfigFile,
    results: list[TrialResult],
    in_flight: list[Unfinished],
    interrupted: list[Unfinished],
) -> None:
    """Mark the interrupted trials whose (task, attempt) ran again since (`rerun`: a later
    trial of the same pair began, finished or not), and how long each interrupted one is
    known to have run (`until`). Each trial's pair is its trial.json's; one without (an
    older trialbox's) is never taken for rerun."""
    began: dict[tuple[str, int], list[datetime]] = {}
    for result in results:
        began.setdefault((result.task_name, result.attempt), []).append(result.started_at)
    for trial in in_flight + interrupted:
        if trial.task_name is not None and trial.attempt is not None:
            began.setdefault((trial.task_name, trial.attempt), []).append(trial.since)
    for trial in interrupted:
        if trial.task_name is not None and trial.attempt is not None:
            later = began[(trial.task_name, trial.attempt)]
            trial.rerun = any(when > trial.since for when in later)
    runs = sorted([config.created_at, *config.resumed_at])
    for trial in interrupted:
        next_run = next((when for when in runs if when > trial.since), None)
        alive = [
            r.finished_at
            for r in results
            if r.finished_at is not None
            and r.finished_at >= trial.since
            and (next_run is None or r.finished_at <= next_run)
        ]
        trial.until = max([trial.since, *alive])


def _at(mtime_ns: int) -> datetime:
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0
