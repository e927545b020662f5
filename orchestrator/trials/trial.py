"""One trial, phase by phase: materialize, image, start, agent, verify, collect, teardown.

Every phase is timed; the first error is recorded with its phase and category and the trial
still collects what it can and tears down. Teardown is shielded: it runs once, whatever
cancelled what, and a cancelled trial still leaves a `result.json` saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from container_runtime import paths
from container_runtime.contract import ContainerResult, read_model
from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.images import ImageBuilder, default_builder
from orchestrator.backends.docker.sandbox import DockerSandbox, SandboxSpec
from orchestrator.common.archive import tar_of_dir, tar_of_files
from orchestrator.common.errors import (
    AgentInfraError,
    RewardFileError,
    TrialboxError,
    VerifierSetupError,
    VerifierTimeoutError,
    WorkflowError,
)
from orchestrator.common.scrub import Scrubber
from orchestrator.common.shielding import ride_out_cancels
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.agents import Agent, WorkflowAgent, parse_agent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.materialize import Materialized, materialize
from orchestrator.trials.result import AgentOutcome, Phase, TrialError, TrialResult
from orchestrator.trials.rewards import headline_reward, read_rewards
from relay import Ending, Relay, RelayOutcome, RelayPolicy

AGENT_STDOUT = f"{paths.AGENT_DIR}/stdout.txt"
AGENT_STDERR = f"{paths.AGENT_DIR}/stderr.txt"
VERIFIER_STDOUT = f"{paths.VERIFIER_DIR}/test-stdout.txt"
COLLECT_LIMIT_SEC = 300.0
TEARDOWN_LIMIT_SEC = 60.0
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def new_id(prefix: str) -> str:
    """A fresh id that is also a valid container name."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", prefix).strip("-.") or "trial"
    return f"{clean[:60]}__{uuid.uuid4().hex[:8]}"


def check_id(value: str, what: str) -> str:
    if not _ID.fullmatch(value):
        raise ValueError(f"{what} {value!r}: use 1-128 letters, digits, '_', '.', '-'")
    return value


def _now() -> datetime:
    return datetime.now(UTC)


class Trial:
    """One agent's attempt at one task. Build with `Trial(...)`, run once with `await run()`."""

    def __init__(
        self,
        task: Task,
        agent: Agent,
        *,
        config: TrialConfig,
        trial_id: str,
        job_id: str,
        metadata: Mapping[str, Any],
        attempt: int,
        builder: ImageBuilder,
        on_grading: Callable[[Trial], None] | None = None,
    ) -> None:
        self.task, self.agent, self.config, self.builder = task, agent, config, builder
        self._on_grading = on_grading
        self.trial_id = check_id(trial_id, "trial id")
        self.job_id = check_id(job_id, "job id")
        self.metadata = dict(metadata)
        self.trial_dir = config.jobs_dir.resolve() / job_id / trial_id
        self.scrubber = Scrubber(config.credentials.values())
        self.result = TrialResult(
            trial_id=trial_id, job_id=job_id, task_name=task.name, agent_spec=agent.spec,
            attempt=attempt, status="running", started_at=_now(), trial_dir=str(self.trial_dir),
        )  # fmt: skip
        self.sandbox: DockerSandbox | None = None
        self._phase: Phase = "materialize"
        self._ran = False

    # -- bookkeeping --------------------------------------------------------------------------

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
        category = exc.category if isinstance(exc, TrialboxError) else "infra"
        self.result.error = TrialError(
            category=category,
            phase=phase or self._phase,
            type=type(exc).__name__,
            message=self.scrubber.text(str(exc)),
            discardable=category == "infra",
        )

    # -- phases -------------------------------------------------------------------------------

    async def _start(self, staged: Materialized, image: str) -> DockerSandbox:
        env = self.task.config.environment
        spec = SandboxSpec(
            image=image, trial_id=self.trial_id, job_id=self.job_id, owner=self.config.owner,
            cpus=env.cpus, memory_mb=env.memory_mb, pids_limit=env.pids_limit,
            network_mode=env.effective_network_mode,
        )  # fmt: skip
        sandbox = await DockerSandbox.create(spec)
        self.sandbox = sandbox
        # /logs and /logs/verifier are root's: an agent running as another user can write
        # only its own folders, and cannot swap the verifier's folder for one of its own.
        skeleton = tar_of_files(
            {paths.CONTAINER_INPUT.lstrip("/"): staged.container_input.model_dump_json().encode()},
            dirs={
                paths.LOGS_DIR.lstrip("/"): 0o755,
                paths.AGENT_DIR.lstrip("/"): 0o777,
                paths.ARTIFACTS_DIR.lstrip("/"): 0o777,
                paths.VERIFIER_DIR.lstrip("/"): 0o755,
            },
        )
        await sandbox.upload(skeleton, "/")
        return sandbox

    async def _run_agent(self, sandbox: DockerSandbox, staged: Materialized) -> None:
        """Run the agent under the relay, which decides once how it ended."""
        await self.agent.prepare(sandbox, staged)
        policy = RelayPolicy(
            term_grace=self.config.stop_term_grace_sec, kill_grace=self.config.stop_kill_grace_sec
        )
        relay = Relay(sandbox, policy=policy, stdout=AGENT_STDOUT, stderr=AGENT_STDERR)
        started = time.monotonic()
        try:
            outcome = await relay.run(
                self.agent.command(),
                timeout_sec=self.task.config.agent.timeout_sec,
                env=self.config.credentials,
            )
        finally:
            if relay.outcome is not None:
                self.result.agent = _agent_outcome(relay.outcome, time.monotonic() - started)
        if outcome.ending is Ending.INFRA_FAILURE:
            raise AgentInfraError(f"the agent's sandbox was lost: {outcome.detail}")

    async def _verify(self, sandbox: DockerSandbox, staged: Materialized) -> bool:
        """Run tests/test.sh in the same sandbox; False when it could not finish."""
        self.result.status = "grading"
        if self._on_grading is not None:
            self._on_grading(self)
        # Whatever the agent wrote into /logs/verifier (a pre-written reward) goes first; the
        # new folder is root's, so processes an agent left running as another user cannot
        # write a reward into it while the verifier runs.
        reset = (
            f"rm -rf {paths.VERIFIER_DIR} {paths.TESTS_DIR} && mkdir -p {paths.VERIFIER_DIR}"
            f" && chmod 0755 {paths.VERIFIER_DIR}"
        )
        cleared = await sandbox.exec(reset, timeout_sec=30, user="root")
        if cleared.exit_code != 0:
            raise VerifierSetupError(f"could not empty {paths.VERIFIER_DIR}: {cleared.output}")
        # /tests may hold the label: root-only, and the verifier runs as root, so an agent's
        # leftover processes running as another user cannot read it during verification.
        tests = await docker_api.in_thread(tar_of_dir, staged.tests_dir, "tests", top_mode=0o700)
        await sandbox.upload(tests, "/")
        verifier = self.task.config.verifier
        outcome = await sandbox.exec(
            f"exec >{VERIFIER_STDOUT} 2>&1 </dev/null; "
            f"$(command -v bash || echo sh) {paths.TESTS_DIR}/test.sh",
            timeout_sec=verifier.timeout_sec,
            env=verifier.env,
            user="root",
            workdir=paths.TESTS_DIR,
        )
        if outcome.timed_out:
            self._fail(
                VerifierTimeoutError(
                    f"tests/test.sh ran past its verifier timeout ({verifier.timeout_sec:g} s)"
                )
            )
            return False
        return True

    async def _collect(self, sandbox: DockerSandbox) -> None:
        with self._timed("collect"):
            await sandbox.download(
                paths.LOGS_DIR, self.trial_dir, file_cap=self.config.log_file_cap_bytes
            )
            if self.scrubber:
                await docker_api.in_thread(self.scrubber.tree, self.trial_dir / "logs")

    async def _teardown(self) -> None:
        if self.sandbox is None or self.config.keep_containers:
            return
        with self._timed("teardown"):
            await self.sandbox.destroy()

    async def _score(self, staged: Materialized) -> None:
        try:
            rewards = await docker_api.in_thread(read_rewards, staged.logs_dir / "verifier")
        except RewardFileError as exc:
            self._fail(exc, "verify")
            return
        self.result.rewards = rewards
        self.result.reward = headline_reward(rewards)

    # -- the whole trial ----------------------------------------------------------------------

    async def run(self) -> TrialResult:
        """Run every phase once; always returns (or, if cancelled, re-raises) with a result."""
        if self._ran:
            raise RuntimeError("a Trial runs once; make a new one")
        self._ran = True
        started = time.monotonic()
        cancelled = False
        verified = False
        staged: Materialized | None = None
        try:
            with self._timed("materialize"):
                staged = await docker_api.in_thread(
                    materialize, self.task, self.trial_dir, trial_id=self.trial_id,
                    metadata=self.metadata, chat_completions_url=self.config.chat_completions_url,
                    credentials_ref=next(iter(self.config.credentials), None),
                )  # fmt: skip
                self.result.task_checksum = staged.checksum
            with self._timed("image"):
                # Built from the trial's checked copy, never from a source that may change.
                copy = self.task.model_copy(update={"path": staged.task_dir})
                built = await self.builder.ensure_image(copy, self.config.base_image_map)
                self.result.image_tag = built.tag
            with self._timed("start"):
                sandbox = await self._start(staged, built.tag)
            with self._timed("agent"):
                await self._run_agent(sandbox, staged)
            with self._timed("verify"):
                verified = await self._verify(sandbox, staged)
        except asyncio.CancelledError:
            cancelled = True
        except Exception as exc:  # recorded with its phase; the trial still cleans up
            self._fail(exc)
        finish = asyncio.ensure_future(self._finish(staged, verified, cancelled, started))
        # Teardown and the result file complete first (each step is bounded), then it goes on.
        if await ride_out_cancels(finish):
            cancelled = True
        finish.result()
        if cancelled:
            raise asyncio.CancelledError
        return self.result

    async def _finish(
        self, staged: Materialized | None, verified: bool, cancelled: bool, started: float
    ) -> None:
        """Collect, score, tear down, write the result: each step bounded, none skipped
        because an earlier one failed. A host abort skips collecting: the sandbox goes now."""
        alive = self.sandbox is not None and not self.sandbox.destroyed
        if alive and staged is not None and not cancelled:
            try:
                await asyncio.wait_for(self._collect(self.sandbox), COLLECT_LIMIT_SEC)
            except Exception as exc:
                self._fail(exc, "collect")
        if not cancelled and staged is not None:
            if verified and self.result.error is None:
                await self._score(staged)
            await self._read_workflow_result(staged)
        try:
            await asyncio.wait_for(self._teardown(), TEARDOWN_LIMIT_SEC)
        except Exception as exc:
            if self.result.rewards:  # a scored trial stays scored; the leak is reported
                self.result.warnings.append(f"teardown failed: {type(exc).__name__}: {exc}")
            else:
                self._fail(exc, "teardown")
        if cancelled:
            self.result.status = "cancelled"
            self.result.agent.termination = self.result.agent.termination or "aborted"
        else:
            self.result.status = "success" if self.result.rewards else "failure"
        self.result.timings.total = time.monotonic() - started
        self.result.finished_at = _now()
        await docker_api.in_thread(self._write_result)

    async def _read_workflow_result(self, staged: Materialized) -> None:
        """A workflow that failed is an `agent` error when nothing was scored, else a warning."""
        if not isinstance(self.agent, WorkflowAgent):
            return
        where = staged.logs_dir / "agent" / "container_result.json"
        try:
            outcome = await docker_api.in_thread(read_model, where, ContainerResult)
        except (OSError, ValueError) as exc:
            problem = f"{paths.CONTAINER_RESULT}: unreadable or missing ({type(exc).__name__})"
        else:
            if outcome.status == "success":
                return
            problem = f"the workflow failed: {outcome.error_type}: {outcome.error}"
        error = self.result.error
        if self.result.rewards or (error is not None and error.type != RewardFileError.__name__):
            self.result.warnings.append(problem)  # scored, or failed for a reason of its own
            return
        self.result.error = None  # the missing reward is a consequence; the workflow is the cause
        self._fail(WorkflowError(problem), "agent")

    def _write_result(self) -> None:
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        (self.trial_dir / "result.json").write_text(
            self.scrubber.text(self.result.model_dump_json(indent=2)), encoding="utf-8"
        )


def _agent_outcome(outcome: RelayOutcome, duration: float) -> AgentOutcome:
    termination = {
        Ending.EXITED: "exited",
        Ending.TIMEOUT: "timeout",
        Ending.ABORTED: "aborted",
        Ending.INFRA_FAILURE: "infra_failure",
    }[outcome.ending]
    return AgentOutcome(
        termination=termination,  # type: ignore[arg-type]
        exit_code=outcome.exit_code,
        duration_sec=duration,
        stop_sec=outcome.stop_sec,
        detail=outcome.detail,
    )


async def run_trial(
    task: Task | str | Path,
    agent: Agent | str = "oracle",
    *,
    config: TrialConfig | None = None,
    trial_id: str | None = None,
    job_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    attempt: int = 1,
    builder: ImageBuilder | None = None,
) -> TrialResult:
    """Run one trial and return its result (also written to `<trial_dir>/result.json`).

    `metadata["label"]`, if given, is the ground truth: the verifier sees it in
    /tests/label.json; the agent never does.
    """
    loaded = task if isinstance(task, Task) else load_task(task)
    trial = Trial(
        loaded,
        agent if isinstance(agent, Agent) else parse_agent(agent),
        config=config or TrialConfig(),
        trial_id=trial_id or new_id(loaded.name),
        job_id=job_id or new_id("job"),
        metadata=metadata or {},
        attempt=attempt,
        builder=builder or default_builder(),
    )
    return await trial.run()
