"""A job's folder on disk: claimed once, locked while a run uses it, its `config.json` written
at the start and its `job.json` rewritten after every finished trial.

Every write goes to a temporary file that replaces the old one (`os.replace`), so a reader,
or a crash, sees the previous version or the next one, never half of one; a SIGKILL loses at
most the trials in flight, whose folders `--resume` then runs again.

`claim_job_dir` and `lock_job_dir` claim and lock the folder; `JobStore` keeps `job.json`
current (a write the host refuses is logged and kept in `write_errors`, and the job goes on);
`mark_superseded` and `record_unrun` write into a trial's result.json.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import aiofiles
import aiofiles.os

from orchestrator.common.atomic_write import write_atomic, write_atomic_sync
from orchestrator.common.host_storage import disk_full, host_storage_error
from orchestrator.common.ids import check_id
from orchestrator.jobs.record import JobRecord
from orchestrator.trials.materialize import claim_folder
from orchestrator.trials.result import TrialResult

CONFIG_FILE = "config.json"
JOB_FILE = "job.json"
LOCK_FILE = ".lock"

log = logging.getLogger(__name__)


async def mark_superseded(earlier: TrialResult, by: str) -> None:
    """Say in an infra try's result.json which trial reran it (`superseded_by`); a result
    with no folder here (placed on a node, or never written) is left as it is."""
    earlier.superseded_by = by
    if not earlier.trial_dir:
        return
    path = Path(earlier.trial_dir) / "result.json"
    try:  # the file as written (scrubbed of secrets), with the one field added
        async with aiofiles.open(path, encoding="utf-8") as handle:
            written = json.loads(await handle.read())
        written["superseded_by"] = by
        await write_atomic(path, json.dumps(written, indent=2))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        log.warning("%s: could not say it was superseded by %s (%s)", path, by, exc)


def record_unrun(jobs_dir: Path, result: TrialResult) -> TrialResult:
    """Give a rollout cancelled before its trial ran a folder with its result.json, so the
    report, `view` and `export` list it as cancelled under its id instead of losing it. A
    folder the host refuses is logged, and the result kept in memory only."""
    job_dir = jobs_dir / result.job_id
    try:
        trial_id = claim_folder(job_dir, result.trial_id)
        folder = job_dir / trial_id
        recorded = result.model_copy(update={"trial_id": trial_id, "trial_dir": str(folder)})
        # Not flushed to disk: an abort of thousands of queued rollouts writes as many on
        # the event loop, and a power cut losing one loses only "it never ran".
        write_atomic_sync(folder / "result.json", recorded.model_dump_json(indent=2), durable=False)
    except (OSError, ValueError) as exc:
        log.warning("%s: could not record cancelled rollout %s (%s)", job_dir, result.trial_id, exc)
        return result
    return recorded


def claim_job_dir(jobs_dir: Path, job_id: str, *, resume: bool) -> Path:
    """The job's folder: made now for a new job (an existing one is refused, so two jobs
    never share a folder), or an earlier job's folder, with its config.json, to resume."""
    job_dir = jobs_dir.resolve() / check_id(job_id, "job id")
    if resume:
        if not (job_dir / CONFIG_FILE).is_file():
            raise ValueError(f"{job_dir}: not a job folder to resume (it has no {CONFIG_FILE})")
        return job_dir
    try:
        job_dir.parent.mkdir(parents=True, exist_ok=True)
        job_dir.mkdir()
    except FileExistsError:
        raise ValueError(
            f"{job_dir}: a job folder of that name exists already; continue it with "
            "--resume (run_job(..., resume=True)) or choose another job name"
        ) from None
    except OSError as exc:
        if not disk_full(exc):
            raise  # a path that is no folder, say: the input's, as the OS said it
        raise host_storage_error(
            exc, f"{job_dir} could not be made", job_dir.parent, then="the job did not start"
        ) from exc
    return job_dir


def lock_job_dir(job_dir: Path) -> int:
    """Hold the job folder's lock (released when the returned descriptor is closed, also by
    the kernel when the process dies): two runs resuming one job would run trials twice."""
    fd = os.open(job_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"{job_dir}: another trialbox run is using this job folder") from None
    return fd


class JobStore:
    """Keeps `job.json` current: `save()` after each result rewrites it with everything
    finished so far. Saves that arrive while one is being written are folded into the next
    write, so a burst of results costs one or two writes, not one each.

    A write the host refuses (its disk full) never stops the job: it is logged, kept in
    `write_errors` (the record says so, and `trialbox run` exits 3), and the next save
    writes everything again. The trials' own result.json files, which `--resume` reads, are
    apart from it."""

    def __init__(self, job_dir: Path, record: Callable[[], JobRecord]) -> None:
        self.job_dir = job_dir
        self._record = record
        self._lock = asyncio.Lock()
        self._changes = 0
        self._written = 0
        self.write_errors: list[str] = []

    def snapshot(self) -> JobRecord:
        """The job as far as it went, with the writes of job.json that failed."""
        return self._record().model_copy(update={"write_errors": list(self.write_errors)})

    async def save(self) -> None:
        """Returns once job.json holds every result recorded before this call, or the write
        failed and is recorded."""
        self._changes += 1
        wanted = self._changes
        async with self._lock:
            if self._written >= wanted:
                return  # a write that began after our change already covered it
            covering = self._changes
            where = self.job_dir / JOB_FILE
            try:
                await write_atomic(where, self.snapshot().model_dump_json(indent=2))
            except OSError as exc:
                error = host_storage_error(
                    exc, f"{where} could not be written", self.job_dir,
                    then="the job goes on; every trial's own result.json is apart from it",
                )  # fmt: skip
                log.warning("%s", error)
                self.write_errors.append(str(error))
                return
            self._written = covering

    async def save_final(self) -> None:
        """The last write, also when the run was cancelled: a cancel cannot cut it short."""
        await asyncio.shield(self.save())
