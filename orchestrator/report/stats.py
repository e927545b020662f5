"""What a job's numbers are on the page: the job's own aggregates, the same with infra
failures counted as zeros, where the time went, and how the rewards are spread.

The official numbers are `jobs.aggregates`' (infra failures, cancelled trials and
unusable tasks never count). Counting infra failures as zeros as well shows what the
infrastructure cost: a large gap between the two says the machine, not the agent, lost
those samples.

`job_summary` gives the figures (`Summary`, through `jobs.aggregates.tally`), `with_infra` the
same with infra as zeros, `histogram` the rewards' spread.
"""

from __future__ import annotations

from collections import Counter
from typing import get_args

from pydantic import BaseModel, Field

from orchestrator.jobs.aggregates import counted, tally
from orchestrator.trials.result import Phase, TrialResult

# The order they run in (trial.py), so each starts where the one before ended.
PHASES: tuple[Phase, ...] = get_args(Phase)
_BINS = 10


class Summary(BaseModel):
    """The job's figures over the last attempt of each (task, attempt)."""

    n_trials: int
    n_expected: int | None = None
    n_in_flight: int = Field(0, description="Trials running now.")
    n_interrupted: int = Field(
        0, description="Trials a stopped run left without a result, their pair not run since."
    )
    n_interrupted_rerun: int = Field(
        0, description="Interrupted trials whose (task, attempt) ran again since: superseded."
    )
    n_superseded: int = Field(0, description="Results a rerun replaced.")
    counts_by_status: dict[str, int] = Field(default_factory=dict)
    counts_by_category: dict[str, int] = Field(default_factory=dict)
    n_counted: int = 0
    mean_reward: float | None = None
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    n_counted_with_infra: int = 0
    mean_reward_with_infra: float | None = None
    pass_at_k_with_infra: dict[int, float] = Field(default_factory=dict)
    phase_seconds: dict[str, float] = Field(
        default_factory=dict, description="Summed over every trial, superseded ones too."
    )
    trial_seconds: float = Field(0.0, description="Sum of the trials' totals.")
    wall_seconds: float = Field(0.0, description="First trial's start to the last one's end.")


class Bin(BaseModel):
    label: str
    count: int


class Histogram(BaseModel):
    """Rewards of the counted trials; those without a reward have their own bar."""

    bins: list[Bin] = Field(default_factory=list)
    no_reward: int = 0


def with_infra(results: list[TrialResult]) -> list[TrialResult]:
    """The results as if infra failures were scored samples (a zero, having no reward)."""
    changed = []
    for result in results:
        if result.error is not None and result.error.discardable:
            error = result.error.model_copy(update={"discardable": False})
            result = result.model_copy(update={"error": error})
        changed.append(result)
    return changed


def job_summary(
    last: list[TrialResult],
    every: list[TrialResult],
    *,
    n_expected: int | None,
    n_in_flight: int,
    n_interrupted: int = 0,
    n_interrupted_rerun: int = 0,
) -> Summary:
    """`last`: one result per (task, attempt); `every`: all results, reruns' earlier ones too
    (they took time). The trials without a result are only counted, never in the figures.
    The figures are the job's own (`jobs.aggregates.tally`), and the same with infra
    failures counted as zeros."""
    official, with_zeros = tally(last), tally(with_infra(last))
    starts = [r.started_at for r in every]
    ends = [r.finished_at for r in every if r.finished_at is not None]
    return Summary(
        n_trials=official.n_trials,
        n_expected=n_expected,
        n_in_flight=n_in_flight,
        n_interrupted=n_interrupted,
        n_interrupted_rerun=n_interrupted_rerun,
        n_superseded=len(every) - len(last),
        counts_by_status=official.counts_by_status,
        counts_by_category=official.counts_by_error_category,
        n_counted=official.n_counted,
        mean_reward=official.mean_reward,
        pass_at_k=official.pass_at_k,
        n_counted_with_infra=with_zeros.n_counted,
        mean_reward_with_infra=with_zeros.mean_reward,
        pass_at_k_with_infra=with_zeros.pass_at_k,
        phase_seconds={p: sum(getattr(r.timings, p) for r in every) for p in PHASES},
        trial_seconds=sum(r.timings.total for r in every),
        wall_seconds=(max(ends) - min(starts)).total_seconds() if starts and ends else 0.0,
    )


def histogram(last: list[TrialResult]) -> Histogram:
    """Two bars (0 and 1) for binary rewards, else ten equal bins from the lowest reward to
    the highest (one bar when they are all equal)."""
    scored = counted(last)
    rewards = [r.reward for r in scored if r.reward is not None]
    no_reward = len(scored) - len(rewards)
    if not rewards:
        return Histogram(no_reward=no_reward)
    if set(rewards) <= {0.0, 1.0}:
        counts = Counter(rewards)
        return Histogram(
            bins=[Bin(label="0", count=counts[0.0]), Bin(label="1", count=counts[1.0])],
            no_reward=no_reward,
        )
    low, high = min(rewards), max(rewards)
    if low == high:
        return Histogram(bins=[Bin(label=f"{low:g}", count=len(rewards))], no_reward=no_reward)
    width = (high - low) / _BINS
    counts = Counter(min(int((r - low) / width), _BINS - 1) for r in rewards)
    bins = [
        Bin(label=f"{low + i * width:.3g}–{low + (i + 1) * width:.3g}", count=counts[i])
        for i in range(_BINS)
    ]
    return Histogram(bins=bins, no_reward=no_reward)
