"""job.json: today's `JobResult`, plus every attempt that a later one superseded.

A trial that ended in `infra` (or was cancelled) says nothing about the agent, so a retry or
a resume runs its (task, attempt) again under a new trial id (`<id>.retry1`, ...), whose
`retry_of` names the trial it reruns: that field, not the id, makes the chain. Every result
is kept; `trials` and the aggregates hold only the last of each chain, and `superseded_by`
says which replaced which. Readers of the
old shape see exactly what they saw before: one result per (task, attempt).

`JobRecord` is the file's model, `record_of` makes it; a `Chain` is one (task, attempt)'s tries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from pydantic import Field

from orchestrator.common.ids import check_id
from orchestrator.jobs.aggregates import summarize
from orchestrator.trials.result import JobResult, TrialResult


def retry_id(base_id: str, retry: int) -> str:
    """The rollout (and trial) id of a chain's `retry`-th rerun; 0 is the first attempt."""
    return base_id if retry == 0 else check_id(f"{base_id}.retry{retry}", "retry id")


@dataclass
class Chain:
    """The attempts at one (task, attempt) pair, oldest first; only the last one counts."""

    base_id: str
    results: list[TrialResult] = field(default_factory=list)

    @property
    def last(self) -> TrialResult | None:
        return self.results[-1] if self.results else None

    def next_id(self) -> str:
        """A rollout id no attempt of this chain has used (its readers never parse it: a
        rerun's `retry_of` says which trial it reruns)."""
        used = {r.rollout_id or r.trial_id for r in self.results}
        n = len(self.results)
        while retry_id(self.base_id, n) in used:
            n += 1
        return retry_id(self.base_id, n)


class JobRecord(JobResult):
    """What `<job_dir>/job.json` holds, rewritten after every finished trial."""

    n_expected: int = Field(
        0, description="(task, attempt) pairs of the job; n_trials reaches it when all ran."
    )
    superseded: list[TrialResult] = Field(
        default_factory=list,
        description="Attempts a later one replaced (infra or cancelled, rerun by a retry or "
        "a resume): kept for the record, never counted.",
    )
    superseded_by: dict[str, str] = Field(
        default_factory=dict, description="trial id -> the trial id of the attempt after it."
    )
    write_errors: list[str] = Field(
        default_factory=list,
        description="Writes of job.json the host refused (a full disk), each saying where and "
        "what to do; the job went on, and `trialbox run` exits 3.",
    )


def replaced_by(chains: Sequence[Chain]) -> dict[str, str]:
    """Trial id -> the trial id of the try after it in its chain (a retry, a resume's rerun,
    a served rollout's next try): the tries that count nowhere."""
    return {a.trial_id: b.trial_id for c in chains for a, b in pairwise(c.results)}


def record_of(job_id: str, job_dir: Path, chains: Sequence[Chain], n_expected: int) -> JobRecord:
    """The job as far as it went: the last result of each chain, and what it replaced."""
    summary = summarize(job_id, job_dir, [c.last for c in chains if c.last is not None])
    return JobRecord(
        **dict(summary),
        n_expected=n_expected,
        superseded=[r for c in chains for r in c.results[:-1]],
        superseded_by=replaced_by(chains),
    )
