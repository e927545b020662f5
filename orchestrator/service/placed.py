"""A trial placed on a cluster node, as the engine sees it: a `result` that follows the
node's events and a `run()` that ends with a `result.json` in this host's jobs folder.

The engine treats it as it treats a local `Trial`: status, grading callbacks, cancel (a
cancel of `run()` reaches the trial on its node through the `Placement`, whose relay does
the host abort there) and settling are the same. What differs is where the files come
from: the node sends the trial's whole folder back, and the result records the node and
engine. A node that died mid-trial leaves a result saying so, with category `infra`.
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
from orchestrator.common.shielding import ride_out_cancels
from orchestrator.gateway.settings import ModelOverride
from orchestrator.sandbox.placement import NodeInfo, Placement, Resources
from orchestrator.service.placed_work import Finished, Grading, TrialWork
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent, WorkflowAgent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.materialize import claim_folder
from orchestrator.trials.result import TrialError, TrialResult, initial_result
from orchestrator.trials.spec import spec_of, write_spec

# Files come back capped at the node (logs at Limits.log_file_cap_bytes); this only keeps a
# broken node from filling the disk.
_FILE_CAP = 1 << 30


class PlacedTrial:
    """One agent's attempt at one task, run on a node of the backend's `Placement`."""

    def __init__(
        self,
        placement: Placement,
        task: Task,
        agent: Agent,
        *,
        config: TrialConfig,
        trial_id: str,
        job_id: str,
        metadata: Mapping[str, Any],
        attempt: int,
        rollout_id: str | None = None,
        session_id: str | None = None,
        prompt: str | None = None,
        model: ModelOverride | None = None,
        on_grading: Callable[[PlacedTrial], None] | None = None,
        retry_of: str | None = None,
    ) -> None:
        self.placement, self.task, self.agent, self.config = placement, task, agent, config
        self.result = initial_result(
            task.name, agent.spec, jobs_dir=config.jobs_dir, trial_id=trial_id, job_id=job_id,
            attempt=attempt, rollout_id=rollout_id, session_id=session_id, retry_of=retry_of,
        )  # fmt: skip
        self.trial_id, self.job_id = self.result.trial_id, self.result.job_id
        self.metadata, self.prompt, self.model = dict(metadata), prompt, model
        self._on_grading = on_grading
        self.trial_dir = Path(self.result.trial_dir)
        self._finished: Finished | None = None
        self._lost: Exception | None = None
        self._spec = spec_of(self.result, task, metadata, prompt=prompt,
                             model=config.model.merged(model) if config.model else None,
                             credentials=config.credentials)  # fmt: skip

    # -- on the way -----------------------------------------------------------------------

    def _on_event(self, event: object) -> None:
        if isinstance(event, NodeInfo):
            self.result.node = event
        elif isinstance(event, Grading):
            self.result.status = "grading"
            if self._on_grading is not None:
                self._on_grading(self)
        elif isinstance(event, Finished):
            self._finished = event

    def _work(self) -> TrialWork:
        """What the node needs (blocking: it reads the agent's code from this disk)."""
        env = self.task.config.environment
        templates = self.task.config.env_templates(include_solution=self.agent.runs_solution)
        names = {t.variable for t in templates}
        host_env = {name: os.environ[name] for name in names if name in os.environ}
        self.agent.carry_files()  # a bundle's code travels with the agent
        code = None
        if isinstance(self.agent, WorkflowAgent):
            code = tar_of_dir(self.agent.source, self.agent.source.name)
        return TrialWork(
            key=f"{self.job_id}/{self.trial_id}",
            resources=Resources(cpus=env.cpus, memory_mb=env.memory_mb),
            agent=self.agent, config=self.config, trial_id=self.trial_id, job_id=self.job_id,
            metadata=self.metadata, attempt=self.result.attempt,
            rollout_id=self.result.rollout_id, session_id=self.result.session_id,
            prompt=self.prompt, model=self.model, host_env=tuple(sorted(host_env.items())),
            agent_code=code,
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
            work = await run_blocking(self._work)
            await self.placement.run(work, self.task, self._on_event)
        except asyncio.CancelledError:
            cancelled = True
        except Exception as exc:  # the node was lost, or placing failed: said in the result
            self._lost = exc
        finish = asyncio.ensure_future(self._finish(cancelled, started))
        if await ride_out_cancels(finish):
            cancelled = True
        finish.result()
        if cancelled:
            raise asyncio.CancelledError
        return self.result

    async def _finish(self, cancelled: bool, started: float) -> None:
        node = self.result.node
        if self._finished is not None:
            self.result = await run_blocking(self._unpack, self._finished)
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
        """The node's folder into this host's trial folder; its result.json (scrubbed on
        the node) with the paths that named the node's folder naming this one."""
        if finished.files:
            extract_stream([finished.files], self.trial_dir, file_cap=_FILE_CAP)
        written = self.trial_dir / "result.json"
        try:
            text = written.read_text(encoding="utf-8")
        except OSError:  # the node could not write it: its in-memory result
            text = finished.result.model_dump_json()
        text = text.replace(finished.node_dir, str(self.trial_dir))
        return TrialResult.model_validate_json(text)

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
