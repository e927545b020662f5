"""A trial's `result.json`: written whole or not at all, and when the host cannot write it,
a result that says so.

What `--resume`, the report and the job read of a finished trial is this file, so it is never
half written (`common/atomic_write.py`), and a host that refuses it (a full disk) turns the
trial infra rather than losing it silently: the outcome it had becomes a warning, the trial's
collected logs go to make room, and the file is written again. A result that still cannot be
written reaches only the trial's caller (job.json, the run's output, the server's status).

`write_result` is the step; `write_whole` the write.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.host_storage import disk_full, host_storage_error
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.trials.record import RERUN, supersede
from orchestrator.trials.result import TrialResult

RESULT_FILE = "result.json"


async def write_result(result: TrialResult, scrubber: Scrubber, trial_dir: Path) -> None:
    """`<trial_dir>/result.json`, scrubbed; or, when the host cannot write it, the result
    made infra, the logs removed to make room when the disk is full, and written again. A
    second failure is said in the result's error; the job goes on either way."""
    try:
        await write_whole(result, scrubber, trial_dir)
        return
    except OSError as exc:
        _lose_the_outcome(result, exc, scrubber, trial_dir)
        if disk_full(exc):
            await run_blocking(shutil.rmtree, trial_dir / "logs", ignore_errors=True)
            result.warnings.append(f"{trial_dir / 'logs'}: removed to make room for {RESULT_FILE}")
    try:
        await write_whole(result, scrubber, trial_dir)
    except OSError as again:
        assert result.error is not None
        result.error.message += (
            f"; written again, it failed too ({again.strerror or again}): this result is "
            "only in what the trial's caller keeps (job.json, the run's output, the "
            "server's status)"
        )


async def write_whole(result: TrialResult, scrubber: Scrubber, trial_dir: Path) -> None:
    """Written whole or not at all (a temporary file, then a rename): a job killed while
    writing it leaves no half a result for `--resume` to misread; a failed write leaves
    no temporary either."""
    await run_blocking(trial_dir.mkdir, parents=True, exist_ok=True)
    text = scrubber.text(result.model_dump_json(indent=2))
    await write_atomic(trial_dir / RESULT_FILE, text)


def _lose_the_outcome(
    result: TrialResult, exc: OSError, scrubber: Scrubber, trial_dir: Path
) -> None:
    """The trial becomes infra: what it had (an error, a reward) is kept as a warning."""
    rewards = result.rewards
    result.rewards, result.reward = {}, None
    where = trial_dir / RESULT_FILE
    lost = host_storage_error(exc, f"{where} could not be written", trial_dir, then=RERUN)
    earlier = supersede(result, lost, "teardown", scrubber)
    if result.status != "cancelled":
        result.status = "failure"
    if rewards:
        result.warnings.append(f"the reward the verifier wrote, not kept: {rewards}")
    if earlier is not None:
        result.warnings.append(f"before: {earlier.category}: {earlier.message}")
