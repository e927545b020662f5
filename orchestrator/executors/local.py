"""Trials in this process: `trials.trial.Trial` on a `Backend` (Docker, the fake), every
trial of the executor sharing one model gateway, made when first needed and closed by
`aclose` (the engine's shutdown).

`LocalExecutor` is the class; its `images` and `leftovers` are the backend itself.
"""

from __future__ import annotations

from orchestrator.executors.base import Executor, TrialEvents, TrialRun
from orchestrator.gateway.server import Gateway
from orchestrator.sandbox import Backend
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult
from orchestrator.trials.trial import Trial


class LocalExecutor(Executor):
    """Runs each trial here, its sandbox made by `backend`."""

    def __init__(self, config: TrialConfig, backend: Backend) -> None:
        self.config, self.backend = config, backend
        self.name = backend.name
        self._gateway: Gateway | None = None

    async def run(self, run: TrialRun, events: TrialEvents) -> TrialResult:
        trial = Trial(
            run.task, run.agent, config=self.config, backend=self.backend,
            trial_id=run.trial_id, job_id=run.job_id, rollout_id=run.rollout_id,
            session_id=run.session_id, prompt=run.prompt, model=run.model,
            gateway=self._model_gateway(), metadata=run.metadata, attempt=run.attempt,
            retry_of=run.retry_of, on_grading=lambda _trial: events.grading(),
        )  # fmt: skip
        events.result(trial.result)
        return await trial.run()

    @property
    def images(self) -> Backend:
        return self.backend

    @property
    def leftovers(self) -> Backend:
        return self.backend

    @property
    def gateway(self) -> Gateway | None:
        return self._gateway

    def _model_gateway(self) -> Gateway | None:
        """One gateway serves every trial of the executor (made when first needed)."""
        if self.config.model is None:
            return None
        if self._gateway is None:
            self._gateway = Gateway()
        return self._gateway

    async def aclose(self) -> None:
        """Close the shared gateway, if one was made."""
        if self._gateway is not None:
            await self._gateway.aclose()
            self._gateway = None
