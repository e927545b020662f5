"""Job ids a person can read: when the job started, then a random part so that two jobs
started in the same second get different folders (and `claim_job_dir` refuses a folder that
exists, so a collision could never mix two jobs).

`default_job_id` is such an id; `fresh_job_id` one whose folder does not exist yet.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.common.ids import check_id

STAMP = "%Y-%m-%d__%H-%M-%S"


def default_job_id(now: datetime | None = None) -> str:
    """`2026-12-01__14-03-07__1a2b3c4d`: the UTC second, then 8 random hex digits."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime(STAMP)
    return check_id(f"{stamp}__{secrets.token_hex(4)}", "job id")


def fresh_job_id(jobs_dir: Path) -> str:
    """A default job id whose folder does not exist yet under `jobs_dir`."""
    while True:
        job_id = default_job_id()
        if not (jobs_dir / job_id).exists():
            return job_id
