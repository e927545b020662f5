"""A trial's finishing steps, after its phases: collect `/logs`, keep the model record, score,
judge the agent's report, tear down, write `result.json`; and the record they complete (each
phase's time, the first error).

Apart from the phases (`trial.py`) because they hold one promise of their own: whatever came
before (an error in any phase, a cancel, a lost sandbox), every step runs, bounded and guarded,
none skipped because an earlier one failed, and the trial ends with a `result.json`. `Trial`
inherits them: they read and record the trial's own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.errors import (
    AgentResourceError,
    ModelUnavailableError,
    RewardFileError,
    TrialboxError,
    WorkflowError,
)
from orchestrator.common.host_storage import disk_full, host_storage_error
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.sandbox import Sandbox
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent
from orchestrator.trials.collect import LogCollector
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.context import TrialContext
from orchestrator.trials.materialize import Materialized
from orchestrator.trials.model_link import ModelLink
from orchestrator.trials.result import Phase, TrialError, TrialResult
from orchestrator.trials.rewards import NO_REWARD, headline_reward
from orchestrator.trials.verifier import VerifierRun, score, where_to_look
from orchestrator.trials.verifier_network import judge_verifier_network, unreachable_line

RERUN = "the trial is infra: discard it and run it again (--max-retries, trialbox run --resume)"


class TrialFinish:
    """The finishing steps of a `Trial` (its base class), and the record they complete."""

    # The trial's state, set by `Trial.__init__` and its phases.
    agent: Agent
    task: Task
    config: TrialConfig
    limits: Limits
    trial_dir: Path
    logs: LogCollector
    scrubber: Scrubber
    result: TrialResult
    sandbox: Sandbox | None
    link: ModelLink | None
    verifier_run: VerifierRun | None
    _context: TrialContext | None
    _phase: Phase

    # -- the record ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _timed(self, phase: Phase) -> Iterator[None]:
        self._phase = phase
        started = time.monotonic()
        try:
            yield
        finally:
            timings = self.result.timings
            setattr(timings, phase, getattr(timings, phase) + time.monotonic() - started)

    def _fail(self, exc: BaseException, phase: Phase | None = None) -> None:
        if self.result.error is not None:
            return  # the first error is the cause; later ones are consequences
        if disk_full(exc) and not isinstance(exc, TrialboxError):
            assert isinstance(exc, OSError)
            what = f"the {phase or self._phase} step could not write the trial's files"
            exc = host_storage_error(exc, what, self.trial_dir, then=RERUN)
        category = exc.category if isinstance(exc, TrialboxError) else "infra"
        self.result.error = TrialError(
            category=category,
            phase=phase or self._phase,
            type=type(exc).__name__,
            message=self.scrubber.text(str(exc)),
            discardable=category == "infra",
        )
        if isinstance(exc, AgentResourceError):
            self.result.warnings.extend(self.scrubber.text(note) for note in exc.warnings)

    # -- the steps ----------------------------------------------------------------------------

    async def _finish(
        self, staged: Materialized | None, verified: bool, cancelled: bool, started: float
    ) -> None:
        """Collect, score, tear down, write the result: each step bounded and guarded, none
        skipped because an earlier one failed. A host abort skips collecting: the sandbox
        goes now."""
        sandbox = self.sandbox
        if sandbox is not None and not sandbox.destroyed and staged is not None and not cancelled:
            await self._guarded("collect", self._collect(sandbox), self.limits.collect_sec)
        await self._guarded("collect", self.logs.settle(self.scrubber, self.limits.collect_sec))
        await self._guarded("agent", self._keep_model_record())
        if not cancelled:
            self._judge_the_model_service()
        if not cancelled and staged is not None:
            if verified and self.result.error is None:
                await self._guarded("verify", self._score(staged))
                await self._guarded("verify", self._judge_the_verifier_network(staged))
            await self._guarded("agent", self._judge_agent_report(staged))
        try:
            await asyncio.wait_for(self._teardown(), self.limits.teardown_sec)
        except Exception as exc:
            if self.result.rewards:  # a scored trial stays scored; the leak is reported
                self.result.warnings.append(f"teardown failed: {type(exc).__name__}: {exc}")
            else:
                self._fail(exc, "teardown")
        if cancelled:
            self.result.status = "cancelled"
            if self.result.agent.termination is None and self._phase == "agent":
                self.result.agent.termination = "aborted"  # None: the agent never ran
        else:
            self.result.status = "success" if self.result.rewards else "failure"
        if self.link is not None:
            await self._guarded("teardown", self.link.release())
        self.result.timings.total = time.monotonic() - started
        self.result.finished_at = datetime.now(UTC)
        await self._write_result()

    async def _guarded(
        self, phase: Phase, step: Coroutine[Any, Any, None], limit: float | None = None
    ) -> None:
        """Run one finishing step; whatever it raises is recorded, and the next step runs."""
        try:
            await asyncio.wait_for(step, limit)
        except Exception as exc:
            self._fail(exc, phase)

    async def _collect(self, sandbox: Sandbox) -> None:
        with self._timed("collect"):
            self.result.warnings.extend(await self.logs.collect(sandbox, self.scrubber))

    async def _keep_model_record(self) -> None:
        if self.link is not None:
            await self.link.keep(self.result, self.trial_dir / "logs" / "agent", self.scrubber)

    def _judge_the_model_service(self) -> None:
        """A run that ended amid a model outage: that is the cause, whatever came after it (a
        failed workflow, a timeout, a missing or zero reward). The sample is discarded
        unscored, since a policy cut off from its model says nothing."""
        record = None if self.link is None else self.link.record
        outage = None if record is None else record.outage()
        if outage is None:
            return
        earlier = self.result.error
        self.result.error = None
        self._fail(ModelUnavailableError(outage), "agent")
        if earlier is not None:
            self.result.warnings.append(f"after the outage: {earlier.type}: {earlier.message}")

    async def _score(self, staged: Materialized) -> None:
        """Scored as the reward files stood when tests/test.sh exited (the verifier exec's
        snapshot, kept with its digests in `reward-snapshot.json`); a collected copy that
        differs is a warning."""
        run = self.verifier_run
        try:
            if run is None or run.snapshot is None:
                self.logs.check_rewards_whole()  # the collected copy is what is scored
            else:
                record = json.dumps(run.snapshot.as_record(), indent=2)
                where = self.trial_dir / "reward-snapshot.json"
                await write_atomic(where, self.scrubber.text(record))
            rewards, notes = await score(run, staged.logs_dir)
            self.result.warnings.extend(notes)
        except RewardFileError as exc:
            if exc.reason == NO_REWARD:  # say where to look
                hint = await run_blocking(where_to_look, self.verifier_run, staged.logs_dir)
                exc = RewardFileError(exc.path, exc.reason + hint)
            self._fail(exc, "verify")
            return
        self.result.rewards = rewards
        self.result.reward = headline_reward(rewards)

    async def _judge_the_verifier_network(self, staged: Materialized) -> None:
        """A verifier that scored nothing positive because it could not reach the network:
        `verifier_network.py` says whose fault that is (infra when this run took the network
        away, the task's when it declares none, else a warning). A replaced score is kept
        as a warning."""
        context = self._context
        if context is None:
            return
        line = await run_blocking(unreachable_line, staged.logs_dir)
        verdict = judge_verifier_network(
            line, self.result.rewards, sandbox_network=context.network_mode,
            task_network=self.task.config.environment.effective_network_mode,
            task_toml=self.task.path / "task.toml",
        )  # fmt: skip
        if verdict.warning is not None:
            self.result.warnings.append(verdict.warning)
        if verdict.error is None:
            return
        earlier, written = self.result.error, self.result.rewards
        self.result.error, self.result.rewards, self.result.reward = None, {}, None
        self._fail(verdict.error, "verify")
        if written:
            self.result.warnings.append(f"the reward the verifier wrote, not kept: {written}")
        elif earlier is not None:
            self.result.warnings.append(f"{earlier.type}: {earlier.message}")

    async def _judge_agent_report(self, staged: Materialized) -> None:
        """A problem the agent reports is an `agent` error when nothing was scored (the
        missing reward is its consequence), else a warning."""
        problem = await self.agent.problem(staged.logs_dir)
        if problem is None:
            return
        error = self.result.error
        if self.result.rewards or (error is not None and error.type != RewardFileError.__name__):
            self.result.warnings.append(problem)  # scored, or failed for a reason of its own
            return
        self.result.error = None
        self._fail(WorkflowError(problem), "agent")

    async def _teardown(self) -> None:
        if self.sandbox is None or self.config.keep_containers:
            return
        with self._timed("teardown"):
            await self.sandbox.destroy()

    async def _write_result(self) -> None:
        """result.json, or, when the host cannot write it, a result that says so: infra (the
        outcome is lost on disk, so the sample is run again), the trial's collected logs
        removed to make room when the disk is full, then written again. A result that still
        cannot be written reaches only the caller (job.json, the summary, the server's
        status); the job goes on either way."""
        try:
            await self._write_result_file()
            return
        except OSError as exc:
            self._lose_the_outcome(exc)
            if disk_full(exc):
                await run_blocking(shutil.rmtree, self.trial_dir / "logs", ignore_errors=True)
                self.result.warnings.append(
                    f"{self.trial_dir / 'logs'}: removed to make room for result.json"
                )
        try:
            await self._write_result_file()
        except OSError as again:
            assert self.result.error is not None
            self.result.error.message += (
                f"; written again, it failed too ({again.strerror or again}): this result is "
                "only in what the trial's caller keeps (job.json, the run's output, the "
                "server's status)"
            )

    def _lose_the_outcome(self, exc: OSError) -> None:
        """The trial becomes infra: what it had (an error, a reward) is kept as a warning."""
        earlier, rewards = self.result.error, self.result.rewards
        self.result.error, self.result.rewards, self.result.reward = None, {}, None
        where = self.trial_dir / "result.json"
        self._fail(host_storage_error(exc, f"{where} could not be written", self.trial_dir,
                                      then=RERUN), "teardown")  # fmt: skip
        if self.result.status != "cancelled":
            self.result.status = "failure"
        if rewards:
            self.result.warnings.append(f"the reward the verifier wrote, not kept: {rewards}")
        if earlier is not None:
            self.result.warnings.append(f"before: {earlier.category}: {earlier.message}")

    async def _write_result_file(self) -> None:
        """Written whole or not at all (a temporary file, then a rename): a job killed while
        writing it leaves no half a result for `--resume` to misread; a failed write leaves
        no temporary either."""
        await run_blocking(self.trial_dir.mkdir, parents=True, exist_ok=True)
        text = self.scrubber.text(self.result.model_dump_json(indent=2))
        await write_atomic(self.trial_dir / "result.json", text)
