"""Many trials: every task times `attempts`, at most `n_concurrent` at once, then aggregates.

It runs on the same `TrialEngine` as the server, so the CLI and the server behave alike.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from math import comb
from pathlib import Path
from typing import Any

import aiofiles

from orchestrator.common.ids import new_id
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import Backend
from orchestrator.service.engine import TrialEngine
from orchestrator.service.rollouts import RolloutRequest
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.agents import Agent, parse_agent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import JobResult, TrialResult

ProgressCallback = Callable[[TrialResult], None]


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


def summarize(job_id: str, job_dir: Path, results: list[TrialResult]) -> JobResult:
    rewards = [r.reward if r.reward is not None else 0.0 for r in counted(results)]
    return JobResult(
        job_id=job_id,
        job_dir=str(job_dir),
        n_trials=len(results),
        n_counted=len(rewards),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        pass_at_k=pass_at_k(results),
        counts_by_status=dict(Counter(r.status for r in results)),
        counts_by_error_category=dict(Counter(r.error.category for r in results if r.error)),
        trials=results,
    )


async def run_job(
    tasks: Sequence[Task | str | Path],
    agent: Agent | str = "oracle",
    *,
    n_concurrent: int = 4,
    attempts: int = 1,
    config: TrialConfig | None = None,
    job_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    backend: Backend | None = None,
    on_trial_done: ProgressCallback | None = None,
) -> JobResult:
    """Run every task `attempts` times and aggregate; writes `<jobs_dir>/<job>/job.json`.

    Tasks are loaded (and so checked) before anything starts: a broken task fails the job at
    once instead of after the others have run.
    """
    if n_concurrent < 1 or attempts < 1:
        raise ValueError("n_concurrent and attempts must be at least 1")
    config = config or TrialConfig()
    loaded = [t if isinstance(t, Task) else await run_blocking(load_task, t) for t in tasks]
    the_agent = agent if isinstance(agent, Agent) else parse_agent(agent)
    engine = TrialEngine(
        n_concurrent=n_concurrent, config=config, backend=backend, job_id=job_id or new_id("job"),
        agent=the_agent.spec,
    )  # fmt: skip

    async def one(task: Task, attempt: int) -> TrialResult:
        rollout_id = new_id(task.name)
        request = RolloutRequest(
            rollout_id=rollout_id, task=str(task.path), agent=the_agent.spec,
            metadata=dict(metadata or {}),
        )  # fmt: skip
        await engine.submit(request, attempt=attempt, task=task, agent=the_agent)
        result = await engine.wait(rollout_id)
        if on_trial_done is not None:
            on_trial_done(result)
        return result

    async with engine:
        results = await asyncio.gather(
            *(one(task, attempt) for task in loaded for attempt in range(1, attempts + 1))
        )
    job_dir = config.jobs_dir.resolve() / engine.job_id
    job = summarize(engine.job_id, job_dir, list(results))
    await run_blocking(job_dir.mkdir, parents=True, exist_ok=True)
    async with aiofiles.open(job_dir / "job.json", "w", encoding="utf-8") as out:
        await out.write(job.model_dump_json(indent=2))
    return job
