"""Trials placed on a cluster's nodes, as the service sees them: `run` ends with a
`result.json` in this host's jobs folder, the result followed live through the node's events.

The engine treats it as it treats a local trial: status, grading callbacks, cancel (a cancel
of `run` reaches the trial on its node through the `Placement`, whose relay does the host
abort there) and settling are the same. What differs is where the files come from: the node
sends the trial's whole folder back, and the result records the node and engine. A node that
died mid-trial leaves a result saying so, with category `infra`.

Sessions are placed the same way (`placed_session.py`): `PlacedExecutor.open_session`.

`PlacedExecutor` is the executor: this host's trial folder, trial.json and result.json, the
node's events, a lost node as `infra`; `PlacedRun` one trial's run (a session's extends it).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.common.archive import extract_stream, tar_of_dir
from orchestrator.common.atomic_write import write_atomic_sync
from orchestrator.common.errors import TrialboxError
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.common.shielding import finish_shielded
from orchestrator.executors.base import Executor, TrialEvents, TrialRun
from orchestrator.executors.node_trial import Finished, Grading, TrialWork
from orchestrator.executors.placement import PlacedWork, Placement, Resources
from orchestrator.sandbox import ImageMaker, Reaper
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import WorkflowAgent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.materialize import claim_folder
from orchestrator.trials.result import NodeInfo, TrialError, TrialResult, initial_result
from orchestrator.trials.session import DEFAULT_IDLE_TTL_SEC, SessionHandle
from orchestrator.trials.spec import spec_of, write_spec

# Files come back capped at the node (logs at Limits.log_file_cap_bytes); this only keeps a
# broken node from filling the disk.
_FILE_CAP = 1 << 30


class PlacedExecutor(Executor):
    """Runs each trial whole on a node of `placement`'s cluster; `images` and `leftovers`
    are the cluster's nodes'."""

    def __init__(
        self,
        config: TrialConfig,
        placement: Placement,
        *,
        images: ImageMaker,
        leftovers: Reaper,
        name: str = "placed",
    ) -> None:
        self.config, self.placement, self.name = config, placement, name
        self._images, self._leftovers = images, leftovers

    async def run(self, run: TrialRun, events: TrialEvents) -> TrialResult:
        return await PlacedRun(self.placement, run, self.config, events).run()

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
        """A session placed as a trial is, its calls carried to its node (`placed_session`)."""
        from orchestrator.executors.placed_session import open_placed_session

        return await open_placed_session(
            self.placement, task, config=self.config, job_id=job_id, session_id=session_id,
            metadata=metadata, idle_ttl_sec=idle_ttl_sec, on_end=on_end,
            use_channel=use_channel,
        )  # fmt: skip

    async def aclose(self) -> None:
        """The nodes' warm pools are removed (the engine's shutdown)."""
        await self.placement.aclose()

    @property
    def images(self) -> ImageMaker:
        return self._images

    @property
    def leftovers(self) -> Reaper:
        return self._leftovers


class PlacedRun:
    """One trial on a node: this host's folder, trial.json and result.json around it."""

    def __init__(
        self, placement: Placement, run: TrialRun, config: TrialConfig, events: TrialEvents
    ) -> None:
        self.placement, self.run_of, self.config, self.events = placement, run, config, events
        self.task, self.agent = run.task, run.agent
        self.result = initial_result(
            run.task.name, run.agent.spec, jobs_dir=config.jobs_dir, trial_id=run.trial_id,
            job_id=run.job_id, attempt=run.attempt, rollout_id=run.rollout_id,
            session_id=run.session_id, retry_of=run.retry_of,
        )  # fmt: skip
        self.trial_id, self.job_id = self.result.trial_id, self.result.job_id
        self.trial_dir = Path(self.result.trial_dir)
        self._finished: Finished | None = None
        self._lost: Exception | None = None
        model = config.model.merged(run.model) if config.model else None
        self._spec = spec_of(self.result, run.task, run.metadata, prompt=run.prompt,
                             model=model, credentials=config.credentials)  # fmt: skip
        events.result(self.result)

    @property
    def key(self) -> str:
        """The work's name where it runs (a cancel, a session's call name it)."""
        return f"{self.job_id}/{self.trial_id}"

    # -- on the way -----------------------------------------------------------------------

    def _on_event(self, event: object) -> None:
        if isinstance(event, NodeInfo):
            self.result.node = event
            self.events.node(event)
        elif isinstance(event, Grading):
            self.result.status = "grading"
            self.events.grading()
        elif isinstance(event, Finished):
            self._finished = event

    def _host_env(self) -> tuple[tuple[str, str], ...]:
        """This host's values of the variables the task's `${VAR}` templates read."""
        templates = self.task.config.env_templates(include_solution=self.agent.runs_solution)
        names = {t.variable for t in templates}
        return tuple(sorted((name, os.environ[name]) for name in names if name in os.environ))

    def _resources(self) -> Resources:
        env = self.task.config.environment
        return Resources(cpus=env.cpus, memory_mb=env.memory_mb)

    def _placed_work(self) -> PlacedWork:
        """The work the node runs (blocking): the trial's (a session's run has its own)."""
        return self._work()

    def _work(self) -> TrialWork:
        """What the node needs (blocking: it reads the agent's code from this disk)."""
        host_env = self._host_env()
        self.agent.carry_files()  # a bundle's code travels with the agent
        code = None
        if isinstance(self.agent, WorkflowAgent):
            code = tar_of_dir(self.agent.source, self.agent.source.name)
        return TrialWork(
            key=self.key, resources=self._resources(),
            agent=self.agent, config=self.config, trial_id=self.trial_id, job_id=self.job_id,
            metadata=dict(self.run_of.metadata), attempt=self.result.attempt,
            rollout_id=self.result.rollout_id, session_id=self.result.session_id,
            prompt=self.run_of.prompt, model=self.run_of.model,
            host_env=host_env, agent_code=code,
        )  # fmt: skip

    # -- the whole trial ----------------------------------------------------------------------

    async def run(self) -> TrialResult:
        """Run on a node; always returns (or, if cancelled, re-raises) with a result.json."""
        started = time.monotonic()
        cancelled = False
        try:
            self.trial_id = await run_blocking(claim_folder, self.trial_dir.parent, self.trial_id)
            self.trial_dir = self.trial_dir.parent / self.trial_id
            self.result.trial_id, self.result.trial_dir = self.trial_id, str(self.trial_dir)
            self._spec.trial_id = self.trial_id
            await run_blocking(self._write_spec)
            work = await run_blocking(self._placed_work)
            await self.placement.run(work, self.task, self._on_event)
        except asyncio.CancelledError:
            cancelled = True
        except Exception as exc:  # the node was lost, or placing failed: said in the result
            self._lost = exc
        await finish_shielded(self._finish(cancelled, started), cancelled=cancelled)
        return self.result

    async def _finish(self, cancelled: bool, started: float) -> None:
        node = self.result.node
        if self._finished is not None:
            self.result = await run_blocking(self._unpack, self._finished)
            self.events.result(self.result)  # the node's, read back: what result.json holds
        else:
            self.result.status = "cancelled" if cancelled and self._lost is None else "failure"
            if self._lost is not None:
                self.result.error = _error_of(self._lost, "agent" if node else "materialize")
            self.result.timings.total = time.monotonic() - started
            self.result.finished_at = datetime.now(UTC)
        self.result.node = node
        self.result.trial_dir = str(self.trial_dir)
        self.result.retry_of = self._spec.retry_of  # the node knows no chain
        await run_blocking(self._write_result)

    def _unpack(self, finished: Finished) -> TrialResult:
        """The node's folder into this host's trial folder, and its result.json (scrubbed on
        the node) read back with this host's folder as its `trial_dir` (the one field that
        names a folder of the trial's; a message naming a file names it where it was)."""
        if finished.files:
            extract_stream([finished.files], self.trial_dir, file_cap=_FILE_CAP)
        written = self.trial_dir / "result.json"
        try:
            result = TrialResult.model_validate_json(written.read_bytes())
        except OSError:  # the node could not write it: its in-memory result
            result = finished.result
        return result.model_copy(update={"trial_dir": str(self.trial_dir)})

    def _write_spec(self) -> None:
        """This host's trial.json, as a local trial writes its own (again after the node's
        folder came back: the node's names its own task folder and no retry chain)."""
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        write_spec(
            self.trial_dir, self._spec, Scrubber(list(self.config.credentials.values())).text
        )

    def _write_result(self) -> None:
        """Whole or not at all, as a local trial writes it."""
        self._write_spec()
        write_atomic_sync(self.trial_dir / "result.json", self.result.model_dump_json(indent=2))


def _error_of(exc: Exception, phase: str) -> TrialError:
    category = exc.category if isinstance(exc, TrialboxError) else "infra"
    return TrialError(
        category=category, phase=phase, type=type(exc).__name__, message=str(exc),
        discardable=category == "infra",
    )  # fmt: skip
