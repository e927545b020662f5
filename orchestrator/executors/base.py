"""The executor interface: one trial run wherever it runs, as the service sees it.

The engine, `run_job`, prewarm, reap and resume talk to an `Executor` only: `run` a trial
(a `TrialRun`) and hear its `TrialEvents`, the images its trials use (`images`, for
prewarm and the base-image check) and the sandboxes a dead run left (`leftovers`, for reap
and resume). `executor_for` picks one from the config, once per engine: `LocalExecutor`
(`local.py`: `trials.trial.Trial` in this process, on a `Backend`) unless the config names
a Ray cluster, then `PlacedExecutor` (`placed.py`: the same `Trial`, whole, on a node of
the cluster, `ray/`). A `Backend` only makes sandboxes; it never decides where a trial runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.gateway.settings import ModelOverride
from orchestrator.sandbox import Backend, ImageMaker, Reaper
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import NodeInfo, TrialResult
from orchestrator.trials.session import DEFAULT_IDLE_TTL_SEC, SessionHandle

if TYPE_CHECKING:
    from orchestrator.gateway.server import Gateway
    from orchestrator.sandbox.backend_config import RayBackendConfig


@dataclass(frozen=True)
class TrialRun:
    """One trial to run: what its `TrialSpec` (trial.json) records, with what the spec
    leaves out and a run needs: the loaded task and agent, the metadata with its label and
    the rollout's model override (the spec keeps neither the label nor a secret)."""

    task: Task
    agent: Agent
    trial_id: str
    job_id: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    attempt: int = 1
    rollout_id: str | None = None
    session_id: str | None = None
    prompt: str | None = None
    model: ModelOverride | None = None
    retry_of: str | None = None


def _ignore(*_args: object) -> None:
    return None


@dataclass(frozen=True)
class TrialEvents:
    """What a running trial tells its caller as it happens, each on the caller's loop.

    `result`: the trial's result as it starts (before `run` first waits) and again whenever
    the executor replaces it (a placed trial's, once its folder is back); the trial fills it
    in as it goes, so the caller reads its live status from it (running, grading) and a
    warning added to it reaches result.json. `node`: where a placed trial runs, once it is
    there. `grading`: its verifier started."""

    result: Callable[[TrialResult], None] = _ignore
    node: Callable[[NodeInfo], None] = _ignore
    grading: Callable[[], None] = _ignore


class Executor(ABC):
    """Runs trials and answers for the images and sandboxes of the place it runs them."""

    name: str = "executor"

    @abstractmethod
    async def run(self, run: TrialRun, events: TrialEvents) -> TrialResult:
        """Run the trial once and return its result, which is written to
        `<jobs_dir>/<job_id>/<trial_id>/result.json` on this host first. A cancel reaches
        the trial where it runs; once its result is written, the cancel is re-raised."""

    @property
    @abstractmethod
    def images(self) -> ImageMaker:
        """Where its trials' images are made (prewarm, the base-image check)."""

    @property
    @abstractmethod
    def leftovers(self) -> Reaper:
        """Where its trials' sandboxes are found and removed (reap, resume, reclaim)."""

    @property
    def gateway(self) -> Gateway | None:
        """The model gateway this process serves its trials with, once one was needed."""
        return None

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
    ) -> SessionHandle:
        """A session on `task` (`trials/session.py`), where this executor runs trials, once
        its sandbox is ready; its folder is this host's `<jobs_dir>/<job_id>/<trial id>`.
        `on_end` is called once it ended (also when it failed to open, before that error
        is raised), its result.json written on this host."""
        raise NotImplementedError(f"the {self.name!r} executor opens no sessions")

    async def aclose(self) -> None:
        """Let go of what the trials shared (the engine's shutdown)."""
        return None


def executor_for(
    config: TrialConfig, backend: Backend | None = None, *, cluster: RayBackendConfig | None = None
) -> Executor:
    """The executor `config` names, made once: trials here on `backend` when one is given,
    else on a Ray cluster (`cluster`, else `config.backend` when it names one), else here on
    the backend `config.backend` names (`backends.build_backend`)."""
    from orchestrator.backends import build_backend
    from orchestrator.executors.local import LocalExecutor

    if backend is not None:
        return LocalExecutor(config, backend)
    where = cluster if cluster is not None else config.backend
    if where.type != "ray":
        return LocalExecutor(config, build_backend(where, config.limits))
    try:
        from orchestrator.executors.ray.cluster import ray_executor
    except ModuleNotFoundError as exc:
        if exc.name != "ray":
            raise
        raise ModuleNotFoundError(
            "trials on a Ray cluster need Ray on this host and on every node: "
            "pip install 'trialbox[ray]'",
            name="ray",
        ) from None
    return ray_executor(config, where)
