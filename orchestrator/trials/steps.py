"""A multi-step task's steps, run in order in the one sandbox, with Harbor's meaning.

Each step (`[[steps]]`, its files in `steps/<name>/`) gets its own turn: its instruction put
where the agent reads it, its `workdir/` copied into the working folder and its `setup.sh`
run there, its healthcheck; then the agent, under the step's timeout and as its user; then
its verifier, with the task's `tests/` merged with the step's own uploaded only now, and the
reward files emptied first, so nothing written before (by the agent, or by an earlier
step's verifier) is scored. The step's `/logs/agent` and `/logs/verifier` come back into
`<trial>/steps/<name>/` and its rewards are kept on its `StepResult`; before the next step,
`/tests`, `/logs/verifier` and `/logs/agent` are emptied, so the next agent never reads a
label or an earlier reward, and each step's agent logs are its own.

What ends a multi-step trial early, as in Harbor: a step whose rewards are below its
`min_reward` gate (or lack a gated key) stops the remaining steps; the trial is scored, its
rewards combined over the steps that ran. An agent that timed out is still verified and
the next step runs. Whatever a step raises (an abort, a lost sandbox, a verifier that wrote
no reward or could not reach the network it needed, a failed setup or healthcheck) ends the
trial with that error, in its category, and no reward (Harbor would score the earlier
steps: docs/harbor.md says so).

The trial's rewards follow `multi_step_reward_strategy`: `mean` (the default), each key's
mean over the steps verified, a key a step lacks counting 0; `final`, the last step's.

`run_steps` is the loop `Trial.run` hands a multi-step task to; `AgentTurn` is what one
agent run is given in place of the task's; `gate_failure` and `combined_rewards` are the
two rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from container_runtime import paths
from orchestrator.common.archive import tar_of_files
from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.errors import (
    RewardFileError,
    TaskError,
    TrialboxError,
    VerifierSetupError,
)
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.sandbox import Healthcheck, Sandbox
from orchestrator.sandbox.commands import REWARD_FILES, PrepareVerifier
from orchestrator.tasks.schema import StepSection
from orchestrator.tasks.tree import read_tree
from orchestrator.trials.artifacts import ARTIFACTS, ArtifactCollector, copy_from
from orchestrator.trials.materialize import Materialized, skeleton_tar
from orchestrator.trials.mcp_config import offer_mcp_servers
from orchestrator.trials.readiness import wait_ready
from orchestrator.trials.record import Phases
from orchestrator.trials.result import AgentOutcome, StepResult, StepTimings
from orchestrator.trials.rewards import NO_REWARD, headline_reward
from orchestrator.trials.services import COLLECT_DIR, run_collect_hooks
from orchestrator.trials.users import user_ids
from orchestrator.trials.verifier import VerifierSetup, score, where_to_look
from orchestrator.trials.verifier_network import judge_verifier_network, unreachable_line

if TYPE_CHECKING:
    from orchestrator.trials.trial import Trial

STEPS_DIR = "steps"  # <trial>/steps/<name>/{agent,verifier}: each step's logs
SETUP_SCRIPT = "setup.sh"


@dataclass(frozen=True)
class AgentTurn:
    """What one agent run of a multi-step trial is given in place of the task's: the step's
    instruction, agent timeout and user. The model link stays open between turns; the
    steps' loop closes it after the last."""

    instruction: str
    timeout_sec: float
    user: str


def gate_failure(rewards: Mapping[str, float], thresholds: Mapping[str, float]) -> str | None:
    """Why `rewards` do not pass the gate `thresholds` ({key: least}), or None when they do:
    a key missing counts as below, as in Harbor."""
    for key, least in thresholds.items():
        got = rewards.get(key)
        if got is None:
            return f"{key} is missing (min_reward {least:g})"
        if got < least:
            return f"{key} = {got:g} is below its min_reward {least:g}"
    return None


def combined_rewards(
    steps: Sequence[StepResult], strategy: Literal["mean", "final"] | None
) -> dict[str, float]:
    """The trial's rewards from its steps': `final`, the last step's; `mean` (None too),
    each key's mean over the steps verified, a key a step lacks counting 0."""
    if not steps:
        return {}
    if strategy == "final":
        return dict(steps[-1].rewards)
    verified = [step.rewards for step in steps if step.rewards]
    keys = sorted({key for rewards in verified for key in rewards})
    return {key: sum(r.get(key, 0.0) for r in verified) / len(verified) for key in keys}


@contextlib.contextmanager
def _timed(timings: StepTimings, part: Literal["setup", "agent", "verify"]) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        setattr(timings, part, getattr(timings, part) + time.monotonic() - started)


async def run_steps(trial: Trial, sandbox: Sandbox, staged: Materialized, phases: Phases) -> None:
    """Run the task's steps in order in `sandbox` (each timed in the trial's phases: its
    setup in `start`, its agent in `agent`, its verifier in `verify`), stop at a failed gate,
    and give the trial the rewards its strategy combines. What a step raises is kept on the
    step, then ends the trial."""
    task = trial.task
    if trial.prompt is not None:
        raise TaskError(
            f"{task.path / 'task.toml'}: a rollout's prompt cannot replace a multi-step "
            "task's instructions (each step has its own, steps/<name>/instruction.md); "
            "leave the prompt out"
        )
    sections = task.config.steps
    try:
        for index, section in enumerate(sections):
            step = StepResult(
                name=section.name, min_reward=section.thresholds, started_at=datetime.now(UTC)
            )
            trial.result.steps.append(step)
            try:
                await _run_step(trial, sandbox, staged.for_step(section.name), phases, index, step)
            except asyncio.CancelledError:
                step.error = "the trial was cancelled in this step"
                raise
            except Exception as exc:
                step.error = trial.scrubber.text(f"{type(exc).__name__}: {exc}")
                raise
            finally:
                step.finished_at = datetime.now(UTC)
            if step.gate_passed is False:
                left = [s.name for s in sections[index + 1 :]]
                trial.result.warnings.append(
                    f"step {section.name!r} did not pass its min_reward gate "
                    f"({gate_failure(step.rewards, step.min_reward or {})}): "
                    f"the remaining steps did not run: {left}"
                )
                break
            if index + 1 < len(sections):
                await _between_steps(trial, sandbox)
    finally:
        if trial.link is not None:
            await asyncio.shield(trial.link.close())
    rewards = combined_rewards(trial.result.steps, task.config.multi_step_reward_strategy)
    trial.result.rewards, trial.result.reward = rewards, headline_reward(rewards)


async def _between_steps(trial: Trial, sandbox: Sandbox) -> None:
    """As root, before the next step: the framework's folders repaired, `/tests` gone and
    `/logs/verifier` emptied (the next agent finds no label and no reward), `/logs/agent`
    emptied (each step's agent logs are its own, as in Harbor)."""
    limits = trial.limits
    stop = trial.config.stop_leftovers or trial.task.config.verifier.stop_leftovers
    done = await sandbox.exec(  # with stop_leftovers, the last verifier's processes go too
        PrepareVerifier(stop_leftovers=stop, empty_agent=True),
        timeout_sec=limits.verifier_setup_sec, user="root",
    )  # fmt: skip
    if trial.egress is not None:  # the next agent under the agent's policy again
        await trial.egress.enter_agent()
        trial.scrubber = Scrubber(trial.secrets())  # the new verifier's credentials too
    if done.exit_code != 0:
        raise VerifierSetupError(
            f"could not empty {paths.TESTS_DIR}, {paths.VERIFIER_DIR} and {paths.AGENT_DIR} "
            f"between two steps (the root exec exited {done.exit_code}): "
            f"{done.output.strip()[-400:] or 'no output'}"
        )


async def _run_step(
    trial: Trial,
    sandbox: Sandbox,
    staged: Materialized,
    phases: Phases,
    index: int,
    step: StepResult,
) -> None:
    """One step: its stage, its agent, its verifier, its logs back, its gate."""
    section = trial.task.config.steps[index]
    where = f"{trial.task.path / 'task.toml'}: steps[{index}]"
    turn = AgentTurn(
        instruction=trial.task.step_instructions[section.name],
        timeout_sec=section.agent.timeout_sec or trial.task.config.agent.timeout_sec,
        user=trial.context.agent_user if section.agent.user is None else str(section.agent.user),
    )
    trial.result.status = "running"
    with phases.enter("start"), _timed(step.timings, "setup"):
        try:
            await _set_the_stage(trial, sandbox, staged, section, turn, where)
        except TrialboxError as exc:
            if index > 0 and exc.args and isinstance(exc.args[0], str):
                exc.args = (
                    f"{exc.args[0]} (an earlier step's agent had this sandbox: what it left "
                    "may be the cause)", *exc.args[1:],
                )  # fmt: skip
            raise
    with phases.enter("agent"), _timed(step.timings, "agent"):
        trial.result.agent = AgentOutcome()  # an agent that never starts has no ending
        try:
            await trial.run_agent(sandbox, staged, turn=turn)
        finally:
            step.agent = trial.result.agent.model_copy()
    with phases.enter("verify"), _timed(step.timings, "verify"):
        trial.result.warnings += [  # [[verifier.collect]], then artifacts, as in one step
            f"step {section.name!r}: {note}"
            for note in await run_collect_hooks(
                trial.task, sandbox, trial.services,
                trial.trial_dir / "steps" / section.name / COLLECT_DIR, trial.scrubber,
                trial.limits.log_file_cap_bytes,
            )
        ]  # fmt: skip
        await _collect_artifacts(trial, sandbox, section, step)
        setup = await _verifier_setup(trial, sandbox, section, where)
        await run_blocking(_merge_tests, staged)
        await trial.verify_work(sandbox, staged, setup=setup)
        step.rewards = await _score_step(trial, sandbox, staged, section.name)
    step.reward = headline_reward(step.rewards)
    if step.min_reward is not None:
        step.gate_passed = gate_failure(step.rewards, step.min_reward) is None


async def _collect_artifacts(
    trial: Trial, sandbox: Sandbox, section: StepSection, step: StepResult
) -> None:
    """As Harbor collects a step's: the task's `artifacts` and the step's own, after its
    agent and before its verifier, into `<trial>/steps/<name>/artifacts/` (each step's copy
    its own); the trial's own collection is then this one, so it copies nothing more."""
    collector = ArtifactCollector(
        trial.trial_dir / "steps" / section.name / ARTIFACTS,
        [*trial.task.config.artifacts, *section.artifacts], trial.limits.log_file_cap_bytes,
    )  # fmt: skip
    trial.artifacts = collector
    notes = await collector.collect(copy_from(sandbox, trial.services), trial.scrubber)
    step.artifacts = list(collector.records)
    trial.result.warnings.extend(f"step {section.name!r}: {note}" for note in notes)


async def _set_the_stage(
    trial: Trial,
    sandbox: Sandbox,
    staged: Materialized,
    section: StepSection,
    turn: AgentTurn,
    where: str,
) -> None:
    """Before the step's agent: its user checked, its instruction where agents read it
    (`/logs/agent`), its `workdir/` copied into the working folder (owned by its user) and
    `setup.sh` run there as that user, then its healthcheck (beside the task's, as in
    Harbor)."""
    owner = await user_ids(sandbox, turn.user, named_by=f"{where}.agent.user")
    container_input = staged.container_input.model_copy(update={"instruction": turn.instruction})
    if trial.link is not None and not trial.agent.on_host:  # the forwarder's address in it
        container_input = trial.link.container_input(container_input, turn.timeout_sec)
    await sandbox.upload(skeleton_tar(container_input), "/")
    await offer_mcp_servers(sandbox, trial.context.mcp_servers)  # /logs/agent was emptied
    assert staged.step_dir is not None
    workdir_files = staged.step_dir / "workdir"
    if workdir_files.is_dir():
        target = trial.context.workdir or await _working_folder(sandbox, turn.user, where)
        files = await run_blocking(read_tree, workdir_files)
        placed = {f"{target.strip('/')}/{name}": item for name, item in files.items()}
        await sandbox.upload(tar_of_files(placed, owner=owner), "/")
        if SETUP_SCRIPT in files:
            await _run_setup(trial, sandbox, turn, f"{target.rstrip('/')}/{SETUP_SCRIPT}", staged)
    if section.healthcheck is not None:
        check = Healthcheck.model_validate(
            section.healthcheck.model_dump(include=set(Healthcheck.model_fields))
        )
        await wait_ready(sandbox, check, where=f"{where}.healthcheck")


async def _working_folder(sandbox: Sandbox, user: str, where: str) -> str:
    """The image's WORKDIR as the step's user sees it (no [environment] workdir is set)."""
    found = await sandbox.exec("pwd", timeout_sec=30.0, user=user)
    folder = found.output.strip().splitlines()[-1:] if found.exit_code == 0 else []
    if not folder or not folder[0].startswith("/"):
        raise TaskError(
            f"{where}: the step has a workdir/ folder, but the sandbox's working folder could "
            f"not be read (pwd exited {found.exit_code}); set [environment] workdir"
        )
    return folder[0]


async def _run_setup(
    trial: Trial, sandbox: Sandbox, turn: AgentTurn, script: str, staged: Materialized
) -> None:
    """The step's workdir/setup.sh, as the step's user from the working folder; a failure
    is the task's (`validation`), naming the file."""
    shell = "$(command -v bash || echo sh)"
    done = await sandbox.exec(
        f"{shell} {script}", timeout_sec=turn.timeout_sec, user=turn.user,
        workdir=trial.context.workdir, env=trial.context.env,
    )  # fmt: skip
    if done.exit_code != 0 or done.timed_out:
        assert staged.step_dir is not None
        said = done.output.strip()[-400:]
        ended = "timed out" if done.timed_out else f"exited {done.exit_code}"
        raise TaskError(
            f"{staged.step_dir / 'workdir' / SETUP_SCRIPT}: {ended} in the sandbox"
            f"{f': {said}' if said else ''}; the step's agent was not started"
        )


async def _verifier_setup(
    trial: Trial, sandbox: Sandbox, section: StepSection, where: str
) -> VerifierSetup:
    """How the step's test.sh runs: its own timeout, [verifier] env with the step's added,
    the step's user (else the task's verifier user), as `Trial.verify_work` would."""
    context, own_user = trial.context, section.verifier.user
    user = context.verifier_user if own_user is None else str(own_user)
    if own_user is None:
        owner = trial.verifier_owner
    else:
        owner = await user_ids(sandbox, user, named_by=f"{where}.verifier.user")
    return VerifierSetup(
        timeout_sec=section.verifier.timeout_sec,
        env={**context.verifier_env, **context.step_verifier_env.get(section.name, {})},
        user=user, owner=owner,
        stop_leftovers=trial.config.stop_leftovers or trial.task.config.verifier.stop_leftovers,
    )  # fmt: skip


def _merge_tests(staged: Materialized) -> None:
    """Blocking: the step's tests on the host, made only now: the task's tests/ (with the
    label), then the step's own over it (its test.sh, when it has one, is the entrypoint)."""
    target, own = staged.tests_dir, staged.step_dir
    assert own is not None
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for source in (staged.task_dir / "tests", own / "tests"):
        if source.is_dir():  # links were checked to stay inside the task: copied as files
            shutil.copytree(source, target, dirs_exist_ok=True)


async def _score_step(
    trial: Trial, sandbox: Sandbox, staged: Materialized, name: str
) -> dict[str, float]:
    """Bring the step's `/logs/agent` and `/logs/verifier` into `<trial>/steps/<name>/`
    (capped, scrubbed) and score its verifier as the trial's is scored: the reward files as
    they stood when test.sh exited. Raises RewardFileError naming the step."""
    folder = trial.trial_dir / STEPS_DIR / name
    cap = trial.limits.log_file_cap_bytes
    cut: list[str] = []
    for path in (paths.AGENT_DIR, paths.VERIFIER_DIR):
        copy = sandbox.download(path, folder, file_cap=cap)
        cut += await asyncio.wait_for(copy, trial.limits.collect_sec)
    if trial.scrubber:
        await run_blocking(trial.scrubber.tree, folder)
    trial.result.warnings += [f"steps/{name}/{file} was cut at {cap} bytes" for file in cut]
    run = trial.verifier_run
    try:
        if run is None or run.snapshot is None:
            for file in REWARD_FILES:
                if f"verifier/{file}" in cut:
                    raise RewardFileError(
                        f"{paths.VERIFIER_DIR}/{file}", f"cut at the collection cap ({cap} bytes)"
                    )
        else:
            record = json.dumps(run.snapshot.as_record(), indent=2)
            await write_atomic(folder / "reward-snapshot.json", trial.scrubber.text(record))
        rewards, notes = await score(run, folder)
    except RewardFileError as exc:
        hint = await run_blocking(where_to_look, run, folder) if exc.reason == NO_REWARD else ""
        hint = hint.replace("logs/verifier/", f"{STEPS_DIR}/{name}/verifier/")
        raise RewardFileError(exc.path, f"step {name!r}: {exc.reason}{hint}") from exc
    trial.result.warnings += [f"step {name!r}: {note}" for note in notes]
    await _judge_the_network(trial, folder, name, rewards)
    return rewards


async def _judge_the_network(
    trial: Trial, folder: Path, name: str, rewards: dict[str, float]
) -> None:
    """The trial's rule for a verifier that scored nothing positive because it could not
    reach the network (`verifier_network.py`), per step: a warning, or the error (its
    category: infra when this run took the network away) that ends the trial unscored."""
    line = await run_blocking(unreachable_line, folder)
    had, given = trial.context.network.verifier_terms()  # as one step's: verdict.py
    verdict = judge_verifier_network(
        line, rewards, sandbox_network=had, task_network=given,
        task_toml=trial.task.config_path,
    )  # fmt: skip
    if verdict.warning is not None:
        trial.result.warnings.append(f"step {name!r}: {verdict.warning}")
    if verdict.error is not None:
        trial.result.warnings.append(
            f"step {name!r}: the reward its verifier wrote, not kept: {rewards}"
        )
        raise verdict.error
