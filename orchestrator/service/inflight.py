"""A rollout the engine holds, from its admission until it settles.

Every rollout the engine accepted must end with a result, including one cancelled while it
waited for a slot (no trial ever ran) and one whose trial crashed through a bug (the trial
wrote none). `result_without_trial` is that result, so `wait`, the status and the callbacks
see an ending in every case.

Its trial, once it holds a slot, runs through the engine's executor (here, or on a cluster's
node); `live` (set from `TrialEvents.result`) is that trial's result as it goes, which is all
the engine reads of it. `InFlight` is the class.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.service.rollouts import RolloutRequest
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent
from orchestrator.trials.result import TrialError, TrialResult


@dataclass
class InFlight:
    """The request with its loaded task and agent; `live`, its trial's result as it goes
    (`executors.base.TrialEvents.result`), once it holds a slot; `runner`, the task driving
    it (cancelling it is how a cancel reaches the rollout); `done`, its result once settled.
    With `max_retries`, `retried` holds its earlier tries (each infra, rerun under the same
    rollout id; `trial_id` is the latest's), and `no_retry`, once set, says no further try
    starts (a cancel that came while a try was finishing, or the engine shutting down)."""

    request: RolloutRequest
    task: Task
    agent: Agent
    attempt: int
    done: asyncio.Future[TrialResult]
    trial_id: str
    live: TrialResult | None = None
    runner: asyncio.Task[None] | None = None
    retry_of: str | None = None  # the trial the running one reruns
    retried: list[TrialResult] = field(default_factory=list)
    no_retry: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running(self) -> bool:
        return self.live is not None

    def result_without_trial(
        self, job_id: str, *, status: str = "cancelled", message: str | None = None
    ) -> TrialResult:
        """The result of a rollout whose trial wrote none: cancelled before it ran, or a bug
        (`message`, an infra error the trainer may discard)."""
        now = datetime.now(UTC)
        error, warnings = None, []
        if status == "cancelled":
            warnings.append("cancelled while queued: its trial never started")
        if message is not None:
            error = TrialError(
                category="infra", phase="materialize", type="EngineError", message=message,
                discardable=True,
            )  # fmt: skip
        return TrialResult(
            trial_id=self.trial_id, job_id=job_id, rollout_id=self.request.rollout_id,
            session_id=self.request.session_id, task_name=self.task.name,
            agent_spec=self.agent.spec, attempt=self.attempt, retry_of=self.retry_of,
            status=status,
            error=error, warnings=warnings, started_at=now, finished_at=now, trial_dir="",
        )  # fmt: skip
