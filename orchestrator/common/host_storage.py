"""Files the host could not write (its disk full, a folder it cannot write): the error that
says what was lost, where, and what to do.

A trial whose files the host could not keep is `infra`: the sample is discarded and run
again, and the job goes on (issue 18 item 5). One helper, so a trial, its result.json and the
job's own files say it in the same words.

`host_storage_error` makes the `HostStorageError`; `disk_full` tells a full disk from other
refusals.
"""

from __future__ import annotations

import errno
from pathlib import Path

from orchestrator.common.errors import HostStorageError

FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full(exc: BaseException) -> bool:
    """The write failed for want of space (or of quota), not for a reason of the folder."""
    return isinstance(exc, OSError) and exc.errno in FULL_DISK


def host_storage_error(exc: OSError, what: str, where: Path, *, then: str = "") -> HostStorageError:
    """`what` failed while writing under `where`; `then`: what becomes of the trial or job."""
    reason = exc.strerror or str(exc)
    if disk_full(exc):
        advice = (
            f"the disk of {where} is full: free space on it, or give --jobs-dir "
            "(TrialConfig.jobs_dir) on a larger filesystem"
        )
    else:
        advice = f"{where} cannot be written: check that folder and its filesystem"
    return HostStorageError(f"{what}: {reason}; {advice}" + (f"; {then}" if then else ""))
