"""A trial as it runs on a cluster node: the work a `Placement` carries there.

The node runs the very same `Trial` a local executor runs, with the node's own backend (its
Docker engine), the node's copy of the task and a model gateway of the node's process, so
the relay, the verifier and the gateway's socket are all beside the sandbox. The driver's
values of the variables the task's `${VAR}` templates read travel with the work and are
given to the trial (the node's environment is never changed). The trial writes into a
scratch folder; its whole folder goes back as one tar with the last event, also when it was
cancelled, and the scratch folder is removed. The result names no folder of the node's:
its `trial_dir` is the driver's to set, where the folder lands.

`TrialWork` is that work.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.common.archive import extract_stream, tar_of_dir
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import ride_out_cancels
from orchestrator.executors.placement import Emit, Resources
from orchestrator.gateway.server import Gateway
from orchestrator.gateway.settings import ModelOverride
from orchestrator.sandbox import Backend
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent, WorkflowAgent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult
from orchestrator.trials.trial import Trial

SCRATCH_ENV = "TRIALBOX_NODE_SCRATCH"
"""Where a node keeps its trials' folders while they run (default: the temp folder)."""

_gateways: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Gateway] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class Grading:
    """The trial's verifier started: the rollout reads `grading`."""


@dataclass(frozen=True)
class Finished:
    """The trial ended (also cancelled): its result and its whole folder as a tar (the
    folder's own files, relative to it). The result's `trial_dir` is empty: the driver sets
    its own."""

    result: TrialResult
    files: bytes


def scratch_root() -> Path:
    """The node's scratch folder for trial folders and shipped agent code."""
    root = Path(os.environ.get(SCRATCH_ENV) or tempfile.gettempdir()) / "trialbox-node"
    root.mkdir(parents=True, exist_ok=True)
    return root


def node_gateway() -> Gateway:
    """One model gateway per node process and loop, shared by its trials (as an engine's)."""
    loop = asyncio.get_running_loop()
    gateway = _gateways.get(loop)
    if gateway is None:
        gateway = _gateways[loop] = Gateway()
    return gateway


async def close_node_gateway() -> None:
    """Close this loop's node gateway, if it has one (its upstream connections with it): a
    node actor lives as long as its driver, but a loop that ends before its process does (a
    test's) closes it so."""
    gateway = _gateways.pop(asyncio.get_running_loop(), None)
    if gateway is not None:
        await gateway.aclose()


@dataclass(frozen=True)
class TrialWork:
    """Everything a node needs to run one trial, picklable. `host_env` holds the driver's
    values of the variables the task's `${VAR}` templates read; `agent_code` the workflow
    agent's code, which lives on the driver."""

    key: str
    resources: Resources
    agent: Agent
    config: TrialConfig
    trial_id: str
    job_id: str
    metadata: dict[str, Any]
    attempt: int
    rollout_id: str | None = None
    session_id: str | None = None
    prompt: str | None = None
    model: ModelOverride | None = None
    host_env: tuple[tuple[str, str], ...] = ()
    agent_code: bytes | None = None

    async def __call__(self, backend: Backend, task: Task, emit: Emit) -> None:
        scratch = Path(await run_blocking(tempfile.mkdtemp, prefix="trial-", dir=scratch_root()))
        trial: Trial | None = None
        cancelled = False
        try:
            trial = Trial(
                task, await self._agent_here(scratch), backend=backend,
                config=self.config.model_copy(update={"jobs_dir": scratch / "jobs"}),
                trial_id=self.trial_id, job_id=self.job_id, metadata=self.metadata,
                attempt=self.attempt, rollout_id=self.rollout_id, session_id=self.session_id,
                prompt=self.prompt, model=self.model,
                gateway=node_gateway() if self.config.model is not None else None,
                on_grading=lambda _trial: emit(Grading()), environ=self.environ(),
            )  # fmt: skip
            await trial.run()
        except asyncio.CancelledError:
            cancelled = True
        finally:
            sending = asyncio.ensure_future(self._send(trial, scratch, emit))
            cancelled = await ride_out_cancels(sending) or cancelled
            sending.result()
        if cancelled:
            raise asyncio.CancelledError

    def environ(self) -> dict[str, str]:
        """What the task's `${VAR}` templates read here, given to the trial: the driver's
        values, as on the driver's host, over the node's own environment (a variable the
        driver does not set is read from the node's)."""
        return {**os.environ, **dict(self.host_env)}

    async def _agent_here(self, scratch: Path) -> Agent:
        """The agent, its workflow code unpacked on this node when it has any."""
        if self.agent_code is None or not isinstance(self.agent, WorkflowAgent):
            return self.agent
        where = scratch / "agent"
        await run_blocking(extract_stream, [self.agent_code], where)
        agent = _copy(self.agent)
        agent.source = where / self.agent.source.name
        return agent

    @staticmethod
    async def _send(trial: Trial | None, scratch: Path, emit: Emit) -> None:
        """The trial's result and folder to the driver; the scratch folder goes."""
        try:
            if trial is not None:
                files = b""
                if await run_blocking(trial.trial_dir.is_dir):
                    files = await run_blocking(tar_of_dir, trial.trial_dir, ".")
                emit(Finished(trial.result.model_copy(update={"trial_dir": ""}), files))
        finally:
            await run_blocking(shutil.rmtree, scratch, ignore_errors=True)


def _copy(agent: WorkflowAgent) -> WorkflowAgent:
    clone = WorkflowAgent.__new__(WorkflowAgent)
    clone.__dict__.update(agent.__dict__)
    return clone
