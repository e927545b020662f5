"""Trials in this process: `trials.trial.Trial` on a `Backend` (Docker, the fake).

`LocalExecutor` is the class: every trial of the executor shares one model gateway, made when
first needed and closed by `aclose` (the engine's shutdown), and, with `warm_pool`, the warm
pools its trials and sessions take sandboxes from (`sandbox/pool.py`, also removed by
`aclose`); its `images` and `leftovers` are the backend itself. `run_trial` is the public
function for one trial, on the backend given or the one its config names
(`backends.build_backend`: it lives here, not beside `Trial`, because `trials/` imports no
backend).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.backends import build_backend
from orchestrator.common.ids import new_id
from orchestrator.common.offload import run_blocking
from orchestrator.executors.base import Executor, TrialEvents, TrialRun
from orchestrator.gateway.server import Gateway
from orchestrator.sandbox import Backend
from orchestrator.sandbox.pool import PooledBackend
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.agents import Agent, parse_agent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult
from orchestrator.trials.session import DEFAULT_IDLE_TTL_SEC, Session, SessionHandle, open_session
from orchestrator.trials.trial import Trial


class LocalExecutor(Executor):
    """Runs each trial here, its sandbox made by `backend`."""

    def __init__(self, config: TrialConfig, backend: Backend) -> None:
        self.config = config
        # With config.warm_pool, trials and sessions take started sandboxes from pools.
        self.pool = PooledBackend(backend, size=config.warm_pool) if config.warm_pool else None
        self.backend: Backend = self.pool or backend
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

    async def open_session(
        self,
        task: Task,
        *,
        job_id: str,
        session_id: str,
        metadata: Mapping[str, Any] | None = None,
        idle_ttl_sec: float | None = DEFAULT_IDLE_TTL_SEC,
        on_end: Callable[[SessionHandle], None] | None = None,
        use_channel: bool = True,
    ) -> Session:
        """A `Session` in this process, on this executor's backend."""
        return await open_session(
            task, config=self.config, backend=self.backend, job_id=job_id,
            session_id=session_id, metadata=metadata, idle_ttl_sec=idle_ttl_sec,
            on_end=on_end, use_channel=use_channel,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Remove the warm pools' idle sandboxes; close the shared gateway, if one was made."""
        if self.pool is not None:
            await self.pool.aclose()
        if self._gateway is not None:
            await self._gateway.aclose()
            self._gateway = None


async def run_trial(
    task: Task | str | Path,
    agent: Agent | str = "oracle",
    *,
    config: TrialConfig | None = None,
    trial_id: str | None = None,
    job_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    attempt: int = 1,
    backend: Backend | None = None,
) -> TrialResult:
    """Run one trial and return its result (also written to `<trial_dir>/result.json`).

    `metadata["label"]`, if given, is the ground truth: the verifier sees it in
    /tests/label.json; the agent never does. `backend` defaults to the one `config` names
    (a Ray cluster's config is refused: its trials run on its nodes, through `run_job` or
    `TrialEngine`).
    """
    config = config or TrialConfig()
    loaded = task if isinstance(task, Task) else await run_blocking(load_task, task)
    # A `bundle:<project>` spec builds a wheel: host work, off the loop like the task's.
    the_agent = agent if isinstance(agent, Agent) else await run_blocking(parse_agent, agent)
    trial = Trial(
        loaded,
        the_agent,
        config=config,
        backend=backend or build_backend(config.backend, config.limits),
        trial_id=trial_id or new_id(loaded.name),
        job_id=job_id or new_id("job"),
        metadata=metadata or {},
        attempt=attempt,
    )
    return await trial.run()
