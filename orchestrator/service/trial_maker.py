"""The trial each rollout of an engine runs, through the engine's one executor.

The executor is picked once, from the engine's config (`executors.base.executor_for`): trials
in this process on the engine's backend, or placed whole on a cluster's nodes. This module
turns a rollout holding a slot into the executor's `TrialRun` and refuses, at submit, a model
override the engine cannot honour; nothing here knows where the trial runs.

`TrialMaker` is the class: `run` runs a rollout's trial, `check_model` is the refusal at submit.
"""

from __future__ import annotations

from orchestrator.executors.base import Executor, TrialEvents, TrialRun
from orchestrator.gateway.server import Gateway
from orchestrator.service.inflight import InFlight
from orchestrator.service.rollouts import RolloutRequest
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult


class TrialMaker:
    """Runs the trials of one engine (its config, executor and job id)."""

    def __init__(self, config: TrialConfig, executor: Executor, job_id: str) -> None:
        self.config, self.executor, self.job_id = config, executor, job_id

    @property
    def gateway(self) -> Gateway | None:
        """The model gateway of the trials run in this process, once one was needed."""
        return self.executor.gateway

    def check_model(self, request: RolloutRequest) -> None:
        """Refuse (`ValueError`) a rollout's model override when the engine has no model
        settings for it to override, or when it sets a sampling key they do not let through
        (at submit, so the client gets a 422, not a trial that fails later)."""
        if request.model is None:
            return
        if self.config.model is None:
            raise ValueError(
                "this engine has no model settings (TrialConfig.model, or --model and "
                "--model-url): a rollout cannot override them"
            )
        self.config.model.check_override(request.model)

    async def run(self, rollout: InFlight, events: TrialEvents) -> TrialResult:
        """The rollout's trial (its current try), run to its result."""
        request = rollout.request
        run = TrialRun(
            rollout.task, rollout.agent, trial_id=rollout.trial_id, job_id=self.job_id,
            metadata=request.metadata, attempt=rollout.attempt, rollout_id=request.rollout_id,
            session_id=request.session_id, prompt=request.prompt, model=request.model,
            retry_of=rollout.retry_of,
        )  # fmt: skip
        return await self.executor.run(run, events)

    async def aclose(self) -> None:
        """Let go of what the executor's trials shared (the engine's shutdown)."""
        await self.executor.aclose()
