"""What a job's trials add up to: which samples count, mean reward, pass@k.

A trainer acts on these numbers, so a sample that says nothing about the agent (cancelled,
an infra failure, a task that could not be used) never enters them as a scored zero.

`is_infra`, `task_unusable` and `counted` say which samples count; `pass_at_k` the estimate;
`tally` gives the figures of a set of results and `summarize` a job's `JobResult`. This is the
one place they are computed: the report tallies with the same function.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from math import comb
from pathlib import Path

from pydantic import BaseModel

from orchestrator.trials.result import JobResult, TrialResult


def is_infra(result: TrialResult) -> bool:
    """A discarded sample: the trial failed for infrastructure reasons."""
    error = result.error
    return result.status == "failure" and error is not None and error.category == "infra"


def task_unusable(result: TrialResult) -> bool:
    """The task could not be used (a validation failure before the agent ran: a broken
    folder, a failing Dockerfile step, an agent the task cannot run): no sample at all."""
    error = result.error
    return error is not None and error.category == "validation" and result.agent.termination is None


def counted(results: Sequence[TrialResult]) -> list[TrialResult]:
    """The samples that say something about the agent: not cancelled, not an infra failure,
    not a task that could not be used (never a scored zero)."""
    return [
        r
        for r in results
        if r.status != "cancelled"
        and not (r.error and r.error.discardable)
        and not task_unusable(r)
    ]


def pass_at_k(results: Sequence[TrialResult]) -> dict[int, float]:
    """Unbiased pass@k (Chen et al. 2021) per task, averaged over tasks; 0/1 rewards only.

    Counted samples only (see `counted`); among them a trial without a reward is a miss.
    Empty when any reward is not 0 or 1.
    """
    by_task: dict[str, list[float]] = defaultdict(list)
    for result in counted(results):
        by_task[result.task_name].append(result.reward if result.reward is not None else 0.0)
    if not by_task or any(r not in (0.0, 1.0) for rs in by_task.values() for r in rs):
        return {}
    max_k = min(len(rs) for rs in by_task.values())
    scores: dict[int, float] = {}
    for k in range(1, max_k + 1):
        per_task = []
        for rewards in by_task.values():
            n, c = len(rewards), int(sum(rewards))
            per_task.append(1.0 - comb(n - c, k) / comb(n, k))
        scores[k] = sum(per_task) / len(per_task)
    return scores


class Tally(BaseModel):
    """What results add up to: the figures a job reports and its report shows."""

    n_trials: int
    n_counted: int
    mean_reward: float | None
    pass_at_k: dict[int, float]
    counts_by_status: dict[str, int]
    counts_by_error_category: dict[str, int]


def tally(results: Sequence[TrialResult]) -> Tally:
    """The figures of `results`, one per (task, attempt): only counted samples enter the
    mean (a counted trial without a reward is a zero) and pass@k."""
    rewards = [r.reward if r.reward is not None else 0.0 for r in counted(results)]
    return Tally(
        n_trials=len(results),
        n_counted=len(rewards),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        pass_at_k=pass_at_k(results),
        counts_by_status=dict(Counter(r.status for r in results)),
        counts_by_error_category=dict(Counter(r.error.category for r in results if r.error)),
    )


def summarize(job_id: str, job_dir: Path, results: list[TrialResult]) -> JobResult:
    """The job's result: the tally of `results`, one per (task, attempt), the last attempt
    of each, with the results themselves."""
    return JobResult(
        job_id=job_id, job_dir=str(job_dir), **tally(results).model_dump(), trials=results
    )
