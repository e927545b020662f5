"""One trial, top to bottom: its phases (materialize, image, start, agent, verify), then its
finishing steps (collect, score, judge, tear down, `result.json`). A multi-step task runs its
steps' agent and verify phases in turn (`steps.py`, from `run`), each scored as it ends.

Every phase is timed; the first error is recorded with its phase and category and the trial
still collects what it can and tears down. The finish holds one promise of its own: whatever
came before (an error in any phase, a cancel, a lost sandbox), every step runs, bounded and
guarded, none skipped because an earlier one failed, and the trial ends with a `result.json`.
Teardown is shielded: it runs once, whatever cancelled what, and a cancelled trial still
leaves a `result.json` saying so. The trial talks to its sandbox only through the `Sandbox`
protocol and to where it runs only through a `Backend`, so the same phases run on Docker, on
the fake backend, or anywhere else.

The finishing work is done by collaborators with explicit inputs: `LogCollector` (`collect.py`)
brings `/logs` back, `verdict.py` scores and applies the category rules, `result_file.py`
writes the result, and `record.py` keeps the timings and the first error.

`Trial` is the class (`run()`; each step through `_guarded`, the finish shielded and awaited),
given its `Backend` by its caller: `run_trial` (`executors/local.py`, which builds the one a
config names; this layer imports no backend) or an executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiofiles

from container_runtime import paths
from orchestrator.common.errors import (
    AgentInfraError,
    AgentSpecError,
    ImageBuildError,
    RuntimeMissingError,
    SandboxError,
    TaskError,
)
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber, check_secret_lengths
from orchestrator.common.shielding import finish_shielded
from orchestrator.gateway.server import Gateway
from orchestrator.gateway.settings import ModelOverride
from orchestrator.sandbox import (
    Backend,
    Capabilities,
    Health,
    ImageOutcome,
    Sandbox,
    SandboxSpec,
)
from orchestrator.sandbox.engine_calls import counting
from orchestrator.sandbox.pool import PoolableSandbox
from orchestrator.sandbox.protocol import SlotSandbox
from orchestrator.sandbox.services import Services
from orchestrator.sandbox.spec import SLOT_DIR
from orchestrator.tasks.compose import compose_file
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent
from orchestrator.trials.artifacts import ARTIFACTS, ArtifactCollector, copy_from
from orchestrator.trials.collect import LogCollector
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.context import TrialContext, plan_context
from orchestrator.trials.egress_link import EgressLink
from orchestrator.trials.faults import after_agent, classify
from orchestrator.trials.guarded import GuardedSandbox
from orchestrator.trials.host_agent import HostAgent, HostModel, HostRun, drive
from orchestrator.trials.materialize import (
    Materialized,
    claim_folder,
    materialize,
    skeleton_tar,
)
from orchestrator.trials.mcp_config import offer_mcp_servers
from orchestrator.trials.model_link import ModelLink
from orchestrator.trials.readiness import wait_ready
from orchestrator.trials.record import Phases, record_error, timed
from orchestrator.trials.result import (
    AgentOutcome,
    EngineCalls,
    Phase,
    TrialResult,
    TrialStatus,
    initial_result,
)
from orchestrator.trials.result_file import write_result
from orchestrator.trials.runtime import check_runtime, runtime_missing
from orchestrator.trials.separate_verifier import SeparateVerifier, plan_separate_verifier
from orchestrator.trials.services import (
    COLLECT_DIR,
    main_fields,
    run_collect_hooks,
    start_services,
)
from orchestrator.trials.spec import spec_of, write_spec
from orchestrator.trials.steps import AgentTurn, run_steps
from orchestrator.trials.users import ROOT, user_ids
from orchestrator.trials.verdict import (
    judge_the_agent_report,
    judge_the_model_service,
    judge_the_verifier_network,
    score_the_verifier,
)
from orchestrator.trials.verifier import (
    Staging,
    VerifierRun,
    VerifierSetup,
    fits_one_exec,
    prepare_verifier,
    verify,
    verify_at_once,
)
from relay import Relay, RelayOutcome, RelayPolicy

AGENT_STDOUT = f"{paths.AGENT_DIR}/stdout.txt"
AGENT_STDERR = f"{paths.AGENT_DIR}/stderr.txt"


class Trial:
    """One agent's attempt at one task. Build with `Trial(...)`, run once with `await run()`."""

    def __init__(
        self,
        task: Task,
        agent: Agent,
        *,
        config: TrialConfig,
        backend: Backend,
        trial_id: str,
        job_id: str,
        metadata: Mapping[str, Any],
        attempt: int,
        rollout_id: str | None = None,
        session_id: str | None = None,
        prompt: str | None = None,
        model: ModelOverride | None = None,
        gateway: Gateway | None = None,
        on_grading: Callable[[Trial], None] | None = None,
        retry_of: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """`environ`: what the task's `${VAR}` templates read (None: this process's)."""
        self.task, self.agent, self.config, self.backend = task, agent, config, backend
        self._environ = environ
        if config.refuse_short_secrets:  # again: model_copy(update=...) skips validators
            check_secret_lengths(config.credentials)
        self.limits = config.limits
        self.prompt = prompt
        self.model = None if config.model is None else config.model.merged(model)
        self._gateway = gateway
        self.link: ModelLink | None = None
        self.egress: EgressLink | None = None  # the task's network policy's proxy, if any
        self._on_grading = on_grading
        self.result = initial_result(
            task.name, agent.spec, jobs_dir=config.jobs_dir, trial_id=trial_id, job_id=job_id,
            attempt=attempt, rollout_id=rollout_id, session_id=session_id, retry_of=retry_of,
        )  # fmt: skip
        self.trial_id, self.job_id = self.result.trial_id, self.result.job_id
        self.rollout_id = rollout_id
        self.metadata = dict(metadata)
        self.trial_dir = Path(self.result.trial_dir)
        self.logs = LogCollector(self.trial_dir, config.limits.log_file_cap_bytes)
        self._context: TrialContext | None = None
        self.verifier_owner = ROOT  # the verifier user's (uid, gid), resolved at the start
        self._separate: SeparateVerifier | None = None  # a verifier in a sandbox of its own
        self.artifacts: ArtifactCollector | None = None  # the task's, once copied
        self.scrubber = Scrubber(self.secrets())
        self.sandbox: Sandbox | None = None
        self.services: Services | None = None  # the task's Compose services (services.py)
        self.relay_outcome: RelayOutcome | None = None
        self._health_at_loss: Health | None = None
        self.verifier_run: VerifierRun | None = None
        self.staged: Materialized | None = None  # the task's copy, once materialized
        self._ran = False
        self.engine_calls: Counter[str] = Counter()  # what it asked of the engine (result)

    # -- the whole trial ----------------------------------------------------------------------

    async def run(self) -> TrialResult:
        """Run every phase once, then the finish; always returns (or, if cancelled, re-raises)
        with a result."""
        if self._ran:
            raise RuntimeError("a Trial runs once; make a new one")
        self._ran = True
        started = time.monotonic()
        phases = Phases(self.result)
        cancelled = False
        verified = False
        with counting(self.engine_calls):
            try:
                sandbox = await self.open_sandbox(phases)
                staged = self.staged
                assert staged is not None
                if self.task.config.steps:  # a multi-step task: its own loop (steps.py)
                    await run_steps(self, sandbox, staged, phases)
                else:
                    with phases.enter("agent"):
                        await self.run_agent(sandbox, staged)
                    with phases.enter("verify"):
                        await self.verify_work(sandbox, staged)
                        verified = True
            except asyncio.CancelledError:
                cancelled = True
            except Exception as exc:  # recorded with its phase; the trial still cleans up
                self._fail(exc, phases.reached)
            # Teardown and the result file complete first (each step is bounded), then on.
            await finish_shielded(
                self.finish(self.staged, verified, cancelled, started), cancelled=cancelled
            )
        return self.result

    async def open_sandbox(self, phases: Phases) -> Sandbox:
        """The phases before the agent (materialize, image, start): the task checked and
        copied (`self.staged`), its image ensured, the sandbox started, its users resolved and
        its healthcheck passed. `run` goes on with the agent; a session
        (`trials/session.py`) with the caller's commands. Raises what a phase raised."""
        with phases.enter("materialize"):
            self.task = self.agent.for_task(self.task)
            self.context = self._plan_context(await self.backend.capabilities())
            self.staged = staged = await self._materialize()
            self.result.task_checksum = staged.checksum
        with phases.enter("image"):
            built = await self._image(staged)
        with phases.enter("start"):
            return await self._start(staged, built)

    # -- the phases ---------------------------------------------------------------------------

    def _plan_context(self, capabilities: Capabilities) -> TrialContext:
        """What the task asks of its sandbox, worked out and checked before any build. With a
        separate verifier, the agent's sandbox is planned for the agent alone (its policy in
        both phases: the verifier's is its own sandbox's)."""
        self._separate = plan_separate_verifier(
            self.task, self.config, self.backend, capabilities, job_id=self.job_id,
            environ=self._environ,
        )  # fmt: skip
        agents_only = self.task
        if self._separate is not None:
            self.result.verifier_sandbox = "separate"
            self._refuse_what_a_separate_verifier_cannot_join()
            agent = self.task.config.agent
            verifier = self.task.config.verifier.model_copy(
                update={"network_mode": agent.network_mode, "allowed_hosts": agent.allowed_hosts}
            )
            agents_only = self.task.model_copy(
                update={"config": self.task.config.model_copy(update={"verifier": verifier})}
            )
        context = plan_context(
            agents_only, self.config, capabilities, backend_name=self.backend.name,
            with_solution=self.agent.runs_solution, environ=self._environ,
        )  # fmt: skip
        self.result.warnings.extend(self.task.warnings)  # e.g. a task.toml key misspelled
        self.result.warnings.extend(context.warnings)
        if self._separate is not None:
            self.result.warnings.extend(self._separate.context.warnings)
        self.egress = EgressLink.planned(context.network, self.config.egress_hosts)
        if self.egress is not None:  # refused before any build where it cannot be enforced
            self.egress.slot_mount(capabilities, self.task.path / "task.toml")
        self.scrubber = Scrubber(self.secrets(context))
        return context

    def _refuse_what_a_separate_verifier_cannot_join(self) -> None:
        """A separate verifier's sandbox is made alone: no egress proxy, no Compose services,
        no second step. A task that needs one of them with it is refused (validation)."""
        if self._separate is None:
            return
        where = self.task.path / "task.toml"
        clash = [
            (self._separate.context.network.proxied,
             "the verifier's allowlist (its sandbox gets no egress proxy)"),
            (compose_file(self.task.path) is not None,
             "a Compose file (the services are not on the verifier's network)"),
            (bool(self.task.config.steps), "[[steps]] (each step verifies in the agent's sandbox)"),
        ]  # fmt: skip
        found = [what for hit, what in clash if hit]
        if found:
            raise TaskError(
                f"{where}: a separate verifier (the task's [verifier], or --verifier separate) "
                f"cannot be given {'; '.join(found)}; verify in the agent's sandbox instead"
            )

    async def _materialize(self) -> Materialized:
        self.trial_id = await run_blocking(claim_folder, self.trial_dir.parent, self.trial_id)
        self.trial_dir = self.logs.trial_dir = self.trial_dir.parent / self.trial_id
        self.result.trial_id, self.result.trial_dir = self.trial_id, str(self.trial_dir)
        # Said before anything else lands in the folder, so no reader finds a trial it
        # cannot name; written again with the digest of the files it copied.
        spec = spec_of(self.result, self.task, self.metadata, prompt=self.prompt,
                       model=self.model, credentials=self.config.credentials)  # fmt: skip
        await run_blocking(write_spec, self.trial_dir, spec, self.scrubber.text, durable=False)
        materialized = await run_blocking(
            materialize, self.task, self.trial_dir, trial_id=self.trial_id,
            rollout_id=self.rollout_id, prompt=self.prompt, metadata=self.metadata,
            chat_completions_url=self.config.chat_completions_url,
            credentials_ref=next(iter(self.config.credentials), None),
        )  # fmt: skip
        spec.task_digest = materialized.checksum
        await run_blocking(write_spec, self.trial_dir, spec, self.scrubber.text)
        return materialized

    async def _image(self, staged: Materialized) -> ImageOutcome:
        """The task's image, built from the trial's checked copy (never from a source that may
        change); a failed build's whole log is kept in the trial's folder."""
        copy = self.task.model_copy(update={"path": staged.task_dir})
        try:
            built = await self.backend.ensure_image(
                copy, self.config.base_image_map, force_build=self.config.force_build
            )
        except ImageBuildError as exc:
            where = self.trial_dir / "image-build.log"
            async with aiofiles.open(where, "w", encoding="utf-8") as out:
                await out.write(exc.log)
            exc.args = (f"{exc.args[0]}\n--- the whole build log: {where} ---",)
            raise
        self.result.image_tag = built.tag
        self.result.warnings.extend(built.warnings)
        if self._separate is not None:  # the verifier's own image, before any agent runs
            self.result.warnings.extend(await self._separate.ensure_image(staged, built))
        if self._needs_runtime and built.runtime == "absent":
            raise RuntimeMissingError(runtime_missing(self._runtime_user, built.tag))
        return built

    @property
    def _needs_runtime(self) -> bool:
        """The agent, the model gateway's in-sandbox forwarder or the egress proxy's runs
        trialbox's Python (an agent on the host reaches the gateway from the host: no
        forwarder)."""
        in_sandbox_model = self.model is not None and not self.agent.on_host
        return self.agent.needs_runtime or in_sandbox_model or self.egress is not None

    @property
    def _runtime_user(self) -> str:
        spec = f"--agent {self.agent.spec}" + (" with a model" if self.model else "")
        policy = " (for the task's network policy: the egress proxy's forwarder)"
        return spec + (policy if self.egress is not None else "")

    async def _start(self, staged: Materialized, built: ImageOutcome) -> Sandbox:
        context = self.context
        capabilities = await self.backend.capabilities()
        model_mount = self._plan_model_link(capabilities)
        # The egress proxy's socket goes in the same folder, and the verifier's tests/ on
        # their way in (`verifier.Staging`): a sandbox gets one wherever it can be mounted.
        slot_mount = model_mount or (SLOT_DIR if capabilities.host_mounts else None)
        if self.egress is not None:
            slot_mount = self.egress.slot_mount(capabilities, self.task.path / "task.toml")
        forwarder = None if self.agent.on_host else self.link  # the gateway's, in the sandbox
        # /logs goes in with the create, before the start (no copy after it), unless its
        # input must name the forwarder's port, known only once that runs in the sandbox.
        skeleton = None if forwarder is not None else skeleton_tar(staged.container_input)
        spec = SandboxSpec(
            image=built.tag, trial_id=self.trial_id, job_id=self.job_id, owner=self.config.owner,
            cpus=context.cpus, memory_mb=context.memory_mb,
            pids_limit=self.task.config.environment.pids_limit, storage_mb=context.storage_mb,
            network_mode=context.network_mode, env=context.env, workdir=context.workdir,
            slot_mount=slot_mount, files=skeleton,
            jobs_dir=str(self.trial_dir.parents[1]),  # <jobs_dir>/<job_id>/<trial_id>
        )  # fmt: skip
        # The task's Compose services, started and healthy before the sandbox joins them.
        self.services = await start_services(
            self.backend, self.task, staged.task_dir, trial_dir=self.trial_dir,
            trial_id=self.trial_id, job_id=self.job_id, owner=self.config.owner,
            jobs_dir=str(spec.jobs_dir), network_mode=spec.network_mode,
            base_image_map=dict(self.config.base_image_map),
        )  # fmt: skip
        spec = spec.model_copy(update=main_fields(self.services, spec.env, spec.mounts))
        self.sandbox = sandbox = await self.backend.create_sandbox(spec)
        self.result.sandbox_from_pool = isinstance(sandbox, PoolableSandbox) and (sandbox.adopted)
        if self.link is not None:
            folder = sandbox.slot_folder if isinstance(sandbox, SlotSandbox) else None
            if model_mount is not None and folder is None:
                raise SandboxError(f"sandbox {sandbox.name} was made without its slot folder")
            await self.link.open(trial_id=self.trial_id, rollout_id=self.rollout_id,
                                 folder=folder if model_mount is not None else None)  # fmt: skip
            self.scrubber = Scrubber(self.secrets())  # the slot's token is a secret
        if self._needs_runtime:  # "present" too: the task's own steps may remove python3
            await check_runtime(sandbox, built.tag, self._runtime_user)
        if self.egress is not None:
            folder = sandbox.slot_folder if isinstance(sandbox, SlotSandbox) else None
            if folder is None:
                raise SandboxError(f"sandbox {sandbox.name} was made without its slot folder")
            await self.egress.open(folder)
            await self.egress.connect(sandbox)
        defaults = await sandbox.image_defaults()
        where = self.task.path / "task.toml"
        if context.agent_user:
            await user_ids(sandbox, context.agent_user, named_by=f"{where}: agent.user")
        self.verifier_owner = await user_ids(
            sandbox, context.verifier_user or defaults.user,
            named_by=f"{where}: verifier.user" if context.verifier_user else "the image's USER",
        )  # fmt: skip
        check = context.healthcheck or defaults.healthcheck
        if check is not None:
            check_where = (
                f"{self.task.path / 'task.toml'}: environment.healthcheck"
                if context.healthcheck is not None
                else f"the HEALTHCHECK of image {built.tag}"
            )
            await wait_ready(sandbox, check, where=check_where)
        if forwarder is not None:
            await forwarder.connect(sandbox)
            timeout = self.task.config.agent.timeout_sec
            container_input = forwarder.container_input(staged.container_input, timeout)
            await sandbox.upload(skeleton_tar(container_input), "/")
        await offer_mcp_servers(sandbox, context.mcp_servers)
        return sandbox

    def _plan_model_link(self, capabilities: Capabilities) -> str | None:
        """The trial's link to its model, planned before the sandbox: where the sandbox must
        mount its own slot folder (None: no model, or an agent on the host)."""
        if self.model is None:
            if self.agent.needs_model:
                raise AgentSpecError(
                    f"--agent {self.agent.spec!r} needs a model: give --model and --model-url "
                    "(TrialConfig.model in Python)"
                )
            return None
        self.link = ModelLink(self._gateway, self.model)
        return self.link.slot_mount(capabilities, in_sandbox=not self.agent.on_host)

    async def run_agent(
        self, sandbox: Sandbox, staged: Materialized, *, turn: AgentTurn | None = None
    ) -> None:
        """Run the agent under the relay, which decides once how it ended; the trial only
        reads that decision. An agent whose loop runs on the host runs here instead. `turn`:
        a multi-step task's step (its instruction, timeout and user; the model link stays
        open for the next)."""
        if isinstance(self.agent, HostAgent):
            await self._run_host_agent(sandbox, staged, self.agent, turn)
            return
        await self.agent.prepare(sandbox, staged)
        policy = RelayPolicy(
            term_grace=self.limits.stop_term_grace_sec,
            kill_grace=self.limits.stop_kill_grace_sec,
            host_stop=self.limits.stop_host_sec,
        )
        guarded = GuardedSandbox(sandbox, lambda: self._before_relay_destroys(sandbox))
        relay = Relay(guarded, policy=policy, stdout=AGENT_STDOUT, stderr=AGENT_STDERR)
        timeout = self.task.config.agent.timeout_sec if turn is None else turn.timeout_sec
        user = self.context.agent_user if turn is None else turn.user
        env = {**self.agent.task_env(self.context), **self.config.credentials}
        if self.egress is not None:
            env.update(self.egress.agent_env())
        if self.link is not None:
            env.update(self.link.agent_env())
            self.link.start_clock(timeout)
        started = time.monotonic()
        try:
            await relay.run(self.agent.command(), timeout_sec=timeout, env=env, user=user)
        finally:
            if relay.outcome is not None:  # first: a cancel while closing must not lose it
                self.relay_outcome = relay.outcome
                duration = time.monotonic() - started
                self.result.agent = AgentOutcome.of_relay(relay.outcome, duration)
            if self.link is not None and turn is None:
                await asyncio.shield(self.link.close())
        assert self.relay_outcome is not None  # run() returned, so the relay decided
        if not self.relay_outcome.scoreable:
            lost = AgentInfraError(f"the agent's sandbox was lost: {self.relay_outcome.detail}")
            health = self._health_at_loss
            cause = None if health is None else classify(health, what=str(lost), **self._mem)
            raise cause or lost
        note = await after_agent(sandbox, self.relay_outcome.exit_code, **self._mem)
        if note is not None:
            self.result.warnings.append(note)
            self.result.agent.detail = "; ".join(filter(None, [self.result.agent.detail, note]))

    async def _run_host_agent(
        self, sandbox: Sandbox, staged: Materialized, agent: HostAgent, turn: AgentTurn | None
    ) -> None:
        """A host-side agent's loop (`host_agent.py`), under the task's agent timeout: past
        it, stopped and `timeout`, then verified; a host abort stops it and destroys the
        sandbox (`aborted`); a sandbox that fails under it is judged as the relay's loss is."""
        await agent.prepare(sandbox, staged)
        timeout = self.task.config.agent.timeout_sec if turn is None else turn.timeout_sec
        model = None
        if self.link is not None:
            assert self.link.slot is not None
            base_url = await self.link.open_loopback()
            self.link.start_clock(timeout)
            model = HostModel(
                base_url=base_url, api_key=self.link.slot.token, name=self.link.model.name,
                sampling=self.link.model.sampling.as_body(), max_turns=self.link.model.max_turns,
            )  # fmt: skip
        link = None if turn is not None else self.link  # a step's: open for the next step
        instruction = (self.prompt or self.task.instruction) if turn is None else turn.instruction
        host = HostRun(
            sandbox, instruction=instruction, timeout_sec=timeout,
            user=self.context.agent_user if turn is None else turn.user,
            workdir=self.context.workdir,
            env={**agent.task_env(self.context), **self.config.credentials,
                 **(self.egress.agent_env() if self.egress is not None else {})}, model=model,
            output_cap=self.limits.session_output_cap_bytes,
            on_stop=None if link is None else link.close,
        )  # fmt: skip
        started = time.monotonic()
        outcome = AgentOutcome(termination="infra_failure", detail="the agent's loop did not end")
        try:
            ending = await drive(agent, host, timeout)
            outcome = AgentOutcome(
                termination=ending.termination, exit_code=ending.exit_code, detail=ending.detail
            )
        except asyncio.CancelledError:
            outcome = AgentOutcome(termination="aborted", detail="the trial was cancelled")
            with contextlib.suppress(Exception):  # a failed removal: teardown tries again
                await finish_shielded(sandbox.destroy(), cancelled=False)
            raise
        except Exception as exc:  # the sandbox failed under a command
            outcome.detail = f"{type(exc).__name__}: {exc}"
            health = await sandbox.health(pids=True)
            cause = classify(health, what=f"the agent's command failed: {exc}", **self._mem)
            raise (cause or exc) from exc
        finally:
            outcome.duration_sec = time.monotonic() - started
            self.result.agent = outcome
            if link is not None:
                await asyncio.shield(link.close())
        note = await after_agent(sandbox, outcome.exit_code, **self._mem)
        if note is not None:
            self.result.warnings.append(note)
            self.result.agent.detail = "; ".join(filter(None, [self.result.agent.detail, note]))

    async def _before_relay_destroys(self, sandbox: Sandbox) -> None:
        """The relay fails closed: read the engine's account and save /logs first (timed as
        collection; the trial is still in its agent phase)."""
        self._health_at_loss = await sandbox.health(pids=True)
        await self._collect(sandbox)

    async def verify_work(
        self, sandbox: Sandbox, staged: Materialized, *, setup: VerifierSetup | None = None
    ) -> None:
        """The verify phase: the framework's folders put back, `tests/` (with the label)
        put in only now, tests/test.sh run in this sandbox: in one exec where it can
        (`verifier.verify_at_once`), else step by step. `setup`: a multi-step task's step's
        (else the task's)."""
        self.result.status = "grading"
        if self._on_grading is not None:  # once: a multi-step trial verifies each step
            on_grading, self._on_grading = self._on_grading, None
            on_grading(self)
        if setup is None:  # a multi-step task's step ran its own hooks and artifacts
            self.result.warnings.extend(  # [[verifier.collect]], best effort (services.py)
                await run_collect_hooks(self.task, sandbox, self.services,
                                        self.trial_dir / COLLECT_DIR, self.scrubber,
                                        self.limits.log_file_cap_bytes)
            )  # fmt: skip
            await self._collect_artifacts(sandbox)  # before anything of the verifier's lands
        if self._separate is not None:
            assert self.artifacts is not None
            await self._verify_separately(self._separate, sandbox, staged, self.artifacts)
            return
        # The agent's connections closed; the verifier's own credentials pick its policy.
        egress_env = {} if self.egress is None else await self.egress.enter_verifier()
        setup = setup or VerifierSetup(
            timeout_sec=self.task.config.verifier.timeout_sec, env=self.context.verifier_env,
            user=self.context.verifier_user, owner=self.verifier_owner,
            stop_leftovers=self.config.stop_leftovers or self.task.config.verifier.stop_leftovers,
        )  # fmt: skip
        if egress_env:
            setup = dataclasses.replace(setup, env={**setup.env, **egress_env})
        if fits_one_exec(setup):  # the usual verifier: tests/ staged, then one exec
            staging = Staging.for_sandbox(sandbox)
            done = await verify_at_once(
                sandbox, staged.tests_dir, setup, self.limits, memory_mb=self.context.memory_mb,
                staging=staging, trajectory=self._trajectory_for_verifier(),
            )  # fmt: skip
            if done is not None:
                self.result.warnings.extend(done.notes)
                if done.handed_over and self.link is not None:
                    self.link.handed_over()
                self.verifier_run = done.run
                return
            leftover = staging.leftovers
        else:
            leftover = ()
        # First: what the agent did to the framework's folders is undone before anything lands.
        self.result.warnings.extend(
            await prepare_verifier(sandbox, setup, self.limits, remove=leftover, **self._mem)
        )
        if self.link is not None:
            try:
                note = await self.link.hand_over(
                    sandbox, agent_name=self.result.agent_spec, scrubber=self.scrubber
                )
            except Exception as exc:  # a lost sandbox is judged by the verifier's run below
                note = f"the recorded conversation was not given to the verifier: {exc!r}"
            if note is not None:
                self.result.warnings.append(note)
        self.verifier_run = await verify(sandbox, staged.tests_dir, setup, self.limits, **self._mem)

    def _trajectory_for_verifier(self) -> bytes | None:
        """The model gateway's recorded conversation for the verifier, if there is one."""
        if self.link is None:
            return None
        try:
            return self.link.trajectory_for_verifier(
                agent_name=self.result.agent_spec, scrubber=self.scrubber
            )
        except Exception as exc:  # never a reason to lose the score
            self.result.warnings.append(
                f"the recorded conversation was not given to the verifier: {exc!r}"
            )
            return None

    async def _collect_artifacts(self, sandbox: Sandbox) -> None:
        """The task's `artifacts` copied out (`trials/artifacts.py`), once: after the agent
        and before anything of the verifier's (the label), or at the finish of a trial whose
        agent failed."""
        if self.artifacts is None:
            self.artifacts = ArtifactCollector(
                self.trial_dir / ARTIFACTS, self.task.config.artifacts,
                self.limits.log_file_cap_bytes,
            )  # fmt: skip
            notes = await self.artifacts.collect(copy_from(sandbox, self.services), self.scrubber)
            self.result.artifacts = list(self.artifacts.records)
            self.result.warnings.extend(notes)

    async def _verify_separately(
        self,
        separate: SeparateVerifier,
        sandbox: Sandbox,
        staged: Materialized,
        artifacts: ArtifactCollector,
    ) -> None:
        """tests/test.sh in a fresh sandbox of its own (`separate_verifier.py`): the agent's
        is removed first; the verifier's /logs/verifier comes back however it ended."""
        sandbox, setup, notes = await separate.open(
            sandbox, staged, trial_id=self.trial_id, logs=self.logs, artifacts=artifacts,
            scrubber=self.scrubber,
        )  # fmt: skip
        self.result.warnings.extend(notes)
        try:
            self.verifier_run = await verify(
                sandbox, separate.tests_dir(staged), setup, self.limits,
                memory_mb=separate.context.memory_mb,
            )  # fmt: skip
        finally:
            self.result.warnings.extend(await separate.collect(self.logs, self.scrubber))

    # -- the finish ---------------------------------------------------------------------------

    async def finish(
        self,
        staged: Materialized | None,
        verified: bool,
        cancelled: bool,
        started: float,
        *,
        ended: TrialStatus | None = None,
    ) -> None:
        """Collect, score, tear down, write the result: each step bounded and guarded, none
        skipped because an earlier one failed. A host abort skips collecting: the sandbox
        goes now. A cancelled agent's ending is the relay's (`aborted`); an agent the relay
        never launched keeps none. `ended`: the status to end with in place of the one the
        steps give (a session closed without verifying: collected, yet `cancelled`)."""
        sandbox = self.sandbox
        if sandbox is not None and not sandbox.destroyed and staged is not None and not cancelled:
            limit = self.limits.collect_sec  # artifacts: a no-op when the verify phase took them
            await self._guarded("collect", self._collect_artifacts(sandbox), limit)
            await self._guarded("collect", self._collect(sandbox), limit)
        await self._guarded("collect", self.logs.settle(self.scrubber, self.limits.collect_sec))
        await self._guarded("agent", self._keep_model_record())
        await self._guarded("verify", self._keep_egress())
        agent_dir = self.trial_dir / "logs" / "agent"
        await self._guarded("agent", self.agent.keep(self.result, agent_dir, self.scrubber))
        if not cancelled:
            record = None if self.link is None else self.link.record
            outage = None if record is None else record.outage()
            judge_the_model_service(self.result, outage, self.scrubber)
        if not cancelled and staged is not None:
            if verified and self.result.error is None:
                logs_dir = staged.logs_dir
                await self._guarded("verify", score_the_verifier(
                    self.result, self.verifier_run, logs_dir=logs_dir, logs=self.logs,
                    trial_dir=self.trial_dir, scrubber=self.scrubber,
                ))  # fmt: skip
                separate = self._separate  # its network is the verifier sandbox's
                await self._guarded("verify", judge_the_verifier_network(
                    self.result, logs_dir=logs_dir,
                    context=self.context if separate is None else separate.context,
                    task=self.task if separate is None else separate.task,
                    scrubber=self.scrubber,
                ))  # fmt: skip
            await self._guarded("agent", self._judge_agent_report(staged))
        try:
            await asyncio.wait_for(self._teardown(), self.limits.teardown_sec)
        except Exception as exc:
            if self.result.rewards:  # a scored trial stays scored; the leak is reported
                self.result.warnings.append(f"teardown failed: {type(exc).__name__}: {exc}")
            else:
                self._fail(exc, "teardown")
        if ended is not None:
            self.result.status = ended
        elif cancelled:
            self.result.status = "cancelled"
        else:
            self.result.status = "success" if self.result.rewards else "failure"
        if self.link is not None:
            await self._guarded("teardown", self.link.release())
        self.result.timings.total = time.monotonic() - started
        self.result.engine_calls = EngineCalls(
            total=sum(self.engine_calls.values()), by_kind=dict(sorted(self.engine_calls.items()))
        )
        self.result.finished_at = datetime.now(UTC)
        await write_result(self.result, self.scrubber, self.trial_dir)

    async def _guarded(
        self, phase: Phase, step: Coroutine[Any, Any, None], limit: float | None = None
    ) -> None:
        """Run one finishing step; whatever it raises is recorded, and the next step runs."""
        try:
            await asyncio.wait_for(step, limit)
        except Exception as exc:
            self._fail(exc, phase)

    async def _collect(self, sandbox: Sandbox) -> None:
        with timed(self.result, "collect"):
            self.result.warnings.extend(await self.logs.collect(sandbox, self.scrubber))

    async def _keep_model_record(self) -> None:
        if self.link is not None:
            await self.link.keep(self.result, self.trial_dir / "logs" / "agent", self.scrubber)

    async def _keep_egress(self) -> None:
        if self.egress is not None:
            await self.egress.keep(self.result, self.trial_dir / "logs", self.scrubber)

    async def _judge_agent_report(self, staged: Materialized) -> None:
        problem = await self.agent.problem(staged.logs_dir)
        judge_the_agent_report(self.result, problem, self.scrubber)

    async def _teardown(self) -> None:
        if (self.sandbox is None and self.services is None) or self.config.keep_containers:
            return
        with timed(self.result, "teardown"):
            try:
                if self._separate is not None:
                    await self._separate.aclose()
            finally:
                try:
                    if self.sandbox is not None:
                        await self.sandbox.destroy()
                finally:
                    if self.services is not None:  # after the sandbox: it is on their network
                        await self.services.down()

    # -- bookkeeping --------------------------------------------------------------------------

    @property
    def context(self) -> TrialContext:
        """The task's execution context, worked out in the first phase."""
        if self._context is None:
            raise RuntimeError("the trial's context is planned in its first phase")
        return self._context

    @context.setter
    def context(self, value: TrialContext) -> None:
        self._context = value

    def secrets(self, context: TrialContext | None = None) -> list[str]:
        """Every value the trial must scrub from what it writes (the scrubber is made again
        when one is added: a slot's token, a new verifier's egress credentials)."""
        secrets = list(self.config.credentials.values())
        context = context or self._context
        if context is not None:
            secrets.extend(context.host_values)
        if self._separate is not None:
            secrets.extend(self._separate.context.host_values)
        if self.model is not None and self.model.api_key is not None:
            secrets.append(self.model.api_key.get_secret_value())
        if self.link is not None and self.link.slot is not None:
            secrets.append(self.link.slot.token)
        if self.egress is not None:
            secrets.extend(self.egress.secrets)
        return secrets

    @property
    def _mem(self) -> dict[str, int]:
        return {"memory_mb": self.context.memory_mb}

    def _fail(self, exc: BaseException, phase: Phase) -> None:
        """The trial's error, unless one is kept already (`record.record_error`)."""
        record_error(self.result, exc, phase, self.scrubber)
