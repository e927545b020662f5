"""The trial each rollout of an engine runs, made when the rollout takes a slot.

When the engine's backend places trials (`Backend.placement`: Ray), the trial is a
`PlacedTrial`: it runs whole on a cluster node, beside the node's Docker engine and the node's
model gateway (`placed_work`), and only its events and its folder come back. Otherwise it is a
local `Trial` on the engine's backend, and every local trial shares the engine's one model
gateway, made when first needed and closed at shutdown. The engine treats both alike, as a
`RolloutTrial`.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.gateway.server import Gateway
from orchestrator.sandbox import Backend
from orchestrator.sandbox.placement import Placement
from orchestrator.service.inflight import InFlight, RolloutTrial
from orchestrator.service.placed import PlacedTrial
from orchestrator.service.rollouts import RolloutRequest
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.trial import Trial


class TrialMaker:
    """Makes the trials of one engine (its config, backend and job id) and owns the model
    gateway its local trials share."""

    def __init__(self, config: TrialConfig, backend: Backend, job_id: str) -> None:
        self.config, self.backend, self.job_id = config, backend, job_id
        self._gateway: Gateway | None = None

    @property
    def gateway(self) -> Gateway | None:
        """The model gateway of the local trials, once one was needed."""
        return self._gateway

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

    def new_trial(self, rollout: InFlight, on_grading: Callable[[], None]) -> RolloutTrial:
        """The rollout's trial: on a cluster node when the backend places trials, else here.
        `on_grading` is called when its verifier starts."""
        placement = self.backend.placement
        if placement is not None:
            return self._placed(placement, rollout, on_grading)
        request = rollout.request
        return Trial(
            rollout.task, rollout.agent, config=self.config, backend=self.backend,
            trial_id=rollout.trial_id, job_id=self.job_id,
            rollout_id=request.rollout_id, session_id=request.session_id,
            prompt=request.prompt, model=request.model, gateway=self._model_gateway(),
            metadata=request.metadata, attempt=rollout.attempt, retry_of=rollout.retry_of,
            on_grading=lambda _trial: on_grading(),
        )  # fmt: skip

    def _placed(
        self, placement: Placement, rollout: InFlight, on_grading: Callable[[], None]
    ) -> PlacedTrial:
        """The placed path: no backend and no gateway of the engine's; the node has its own."""
        request = rollout.request
        return PlacedTrial(
            placement, rollout.task, rollout.agent, config=self.config,
            trial_id=rollout.trial_id, job_id=self.job_id, rollout_id=request.rollout_id,
            session_id=request.session_id, prompt=request.prompt, model=request.model,
            metadata=request.metadata, attempt=rollout.attempt, retry_of=rollout.retry_of,
            on_grading=lambda _trial: on_grading(),
        )  # fmt: skip

    def _model_gateway(self) -> Gateway | None:
        """One gateway serves every local trial of the engine (made when first needed)."""
        if self.config.model is None:
            return None
        if self._gateway is None:
            self._gateway = Gateway()
        return self._gateway

    async def aclose(self) -> None:
        """Close the shared gateway, if one was made (the engine's shutdown)."""
        if self._gateway is not None:
            await self._gateway.aclose()
            self._gateway = None
