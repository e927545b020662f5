"""The verifier step: score the agent's work in the very sandbox it worked in.

Whatever the agent wrote into /logs/verifier (a pre-written reward) goes first, and the new
folder is root's; `tests/` (which may hold the label) arrives only now, root-only. As in
Harbor, tests/test.sh runs as the task's `verifier.user`, else the image's USER, else root,
from the task's `environment.workdir`, else the image's WORKDIR. Run as root, an agent's
leftover processes running as another user can neither read the label nor write a reward.
Run as another user, /tests and /logs/verifier become that user's, so a leftover process of
the agent's running as that same user could: docs/harbor.md says so.

`prepare_verifier` is the one root exec that puts the framework's paths back
(`sandbox.commands.PrepareVerifier`; run again once `free_pids` freed the pids when every one
was taken); `run_verifier` runs test.sh with the reward files printed right after it
(`RunVerifier`), and `verify` is that run judged from outside when the sandbox fails it.

Most verifiers are root's and stop nothing first; for them `verify_at_once` does all three in
one exec (`PrepareAndVerify`) once tests/ and the conversation the model gateway hands over
are staged (`Staging`: written into the sandbox's slot folder on a local engine, else
uploaded): each exec or upload is about 50 ms of engine work on a trivial trial's critical
path. The label then waits, before the agent's paths are put back, in a root-only folder
under a name no agent could guess; a leftover process of another user cannot enter it, and
root's could read `/tests` in the stepwise order too. With `stop_leftovers` the steps stay
apart, so the leftovers are gone before the label arrives; with another user's verifier too,
since the exec that repairs as root cannot then run test.sh as that user.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from secrets import token_hex

from container_runtime import paths
from orchestrator.common.archive import tar_of_dir, tar_of_files
from orchestrator.common.errors import (
    SandboxError,
    VerifierSetupError,
    VerifierTimeoutError,
)
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import ExecResult, Sandbox
from orchestrator.sandbox.commands import (
    FOUND,
    STOPPED,
    PrepareAndVerify,
    PrepareVerifier,
    RunVerifier,
    timed_out,
)
from orchestrator.sandbox.protocol import SlotSandbox
from orchestrator.sandbox.spec import SLOT_DIR
from orchestrator.trials.faults import explained, free_pids, raise_if_going
from orchestrator.trials.rewards import (
    RewardSnapshot,
    changed_after,
    parse_snapshot,
    read_rewards,
)


@dataclass(frozen=True)
class VerifierSetup:
    """How tests/test.sh is run: its time limit, its own variables, its user and that user's
    (uid, gid), resolved before the agent ran (`trials/users.py`); and whether the agent's
    leftover processes are stopped first (`--stop-leftovers`, `[verifier] stop_leftovers`)."""

    timeout_sec: float
    env: Mapping[str, str] = field(default_factory=dict)
    user: str = ""  # "": the image's USER
    owner: tuple[int, int] = (0, 0)
    stop_leftovers: bool = False


@dataclass(frozen=True)
class VerifierRun:
    """How tests/test.sh ended in the sandbox, and the reward files as they stood then (None:
    the exec printed no whole snapshot, so the collected copy is scored)."""

    exit_code: int | None
    seconds: float
    snapshot: RewardSnapshot | None = None


def _findings(output: str) -> list[str]:
    """The prepare script's report, as warnings."""
    notes = []
    for line in output.splitlines():
        if line.startswith(FOUND):
            notes.append(
                f"before the verifier: {line.removeprefix(FOUND).strip()}; trialbox put it "
                "back as the verifier expects it (a real folder of root's, empty where the "
                "verifier writes; what was there is the agent's doing, or the image's)"
            )
        elif line.startswith(STOPPED) and line.removeprefix(STOPPED).strip() not in ("", "0"):
            notes.append(
                "the agent's leftover processes were stopped before the verifier "
                f"(stop_leftovers; {line.removeprefix(STOPPED).strip()} signalled): a service "
                "it left running is gone too"
            )
    return notes


async def _prepare(
    sandbox: Sandbox, setup: VerifierSetup, limits: Limits, remove: tuple[str, ...]
) -> list[str]:
    prepare = PrepareVerifier(stop_leftovers=setup.stop_leftovers, remove=remove)
    done = await sandbox.exec(prepare, timeout_sec=limits.verifier_setup_sec, user="root")
    if done.exit_code != 0:
        raise VerifierSetupError(
            f"could not prepare {paths.LOGS_DIR} and empty {paths.VERIFIER_DIR} (the root "
            f"exec exited {done.exit_code}): {done.output.strip() or 'no output'}"
        )
    return _findings(done.output)


async def prepare_verifier(
    sandbox: Sandbox,
    setup: VerifierSetup,
    limits: Limits,
    *,
    memory_mb: int,
    remove: tuple[str, ...] = (),
) -> list[str]:
    """As root, before anything of the verifier's lands: stop the agent's leftovers (when
    asked), put back every framework path the agent replaced (`/logs`, `/logs/agent`,
    `/logs/artifacts`, `/opt/trialbox`: real folders of root's, documented modes), empty
    `/logs/verifier` and `/tests`. The notes are warnings: what was found, what was stopped.

    If no command can start because every pid is taken, the host stops the leftovers
    (`free_pids`) and it runs again; a sandbox that died is put in its true cause's category.
    `remove`: paths removed too (what a one-exec try that failed left staged).
    """
    notes: list[str] = []
    try:
        notes.extend(await _prepare(sandbox, setup, limits, remove))
    except (VerifierSetupError, SandboxError) as exc:
        freed = await free_pids(sandbox) if isinstance(exc, VerifierSetupError) else None
        if freed is None:
            cause = await explained(sandbox, exc, memory_mb=memory_mb)
            if cause is exc:
                raise
            raise cause from exc
        notes.append(freed)
        notes.extend(await _prepare(sandbox, setup, limits, remove))
    return notes


async def run_verifier(
    sandbox: Sandbox, tests_dir: Path | None, setup: VerifierSetup, limits: Limits
) -> VerifierRun:
    """Upload `tests_dir` as /tests (only its user may enter it: root, or the verifier's
    user), run tests/test.sh, and keep the reward files as they stood at its exit. None: the
    image holds /tests already (a separate verifier's image, as in Harbor).

    Ownership comes with the upload (the engine extracts as itself), so no capability is
    needed inside the sandbox: an exec as root in an image whose USER is not root may have
    none. Raises VerifierTimeoutError when tests/test.sh overruns its timeout.
    """
    owner = setup.owner
    if tests_dir is not None:
        tests = await run_blocking(tar_of_dir, tests_dir, "tests", top_mode=0o700, owner=owner)
        await sandbox.upload(tests, "/")
    if owner != (0, 0):
        verifier_dir = paths.VERIFIER_DIR.lstrip("/")
        await sandbox.upload(tar_of_files({}, dirs={verifier_dir: 0o755}, owner=owner), "/")
    mark = f"trialbox-reward-{token_hex(8)}"
    outcome = await sandbox.exec(
        RunVerifier(mark), timeout_sec=setup.timeout_sec, env=setup.env, user=setup.user
    )
    return _how_it_ended(outcome, outcome.output, mark, setup, timed_out=outcome.timed_out)


def _how_it_ended(
    outcome: ExecResult, output: str, mark: str, setup: VerifierSetup, *, timed_out: bool
) -> VerifierRun:
    """tests/test.sh's run from its exec (`output`: the part the run printed), or
    VerifierTimeoutError when it ran past its timeout. No snapshot from cut output."""
    if timed_out:
        raise VerifierTimeoutError(
            f"tests/test.sh ran past its verifier timeout ({setup.timeout_sec:g} s)"
        )
    snapshot = None if outcome.truncated else parse_snapshot(output, mark)
    return VerifierRun(exit_code=outcome.exit_code, seconds=outcome.duration_sec, snapshot=snapshot)


async def verify(
    sandbox: Sandbox,
    tests_dir: Path | None,
    setup: VerifierSetup,
    limits: Limits,
    *,
    memory_mb: int,
) -> VerifierRun:
    """`run_verifier`, judged from outside when the sandbox fails it: a sandbox that died is
    put in the category of its true cause. How tests/test.sh ended."""
    try:
        run = await run_verifier(sandbox, tests_dir, setup, limits)
    except SandboxError as exc:
        cause = await explained(sandbox, exc, memory_mb=memory_mb)
        if cause is exc:
            raise
        raise cause from exc
    return await _judged(sandbox, run, memory_mb)


async def _judged(sandbox: Sandbox, run: VerifierRun, memory_mb: int) -> VerifierRun:
    if run.exit_code is None or run.exit_code >= 128:  # killed: the sandbox too?
        what = f"tests/test.sh ended with {run.exit_code}"
        raise_if_going(await sandbox.health(), what=what, memory_mb=memory_mb)
    return run


@dataclass(frozen=True)
class VerifiedAtOnce:
    """What the one exec did: the prepare's notes, the run, and whether the handed-over
    conversation became /logs/agent/trajectory.json (the agent had saved none)."""

    notes: list[str]
    run: VerifierRun
    handed_over: bool


def fits_one_exec(setup: VerifierSetup) -> bool:
    """Whether `verify_at_once` may run this verifier (see the module's docstring)."""
    return setup.owner == (0, 0) and not setup.stop_leftovers


@dataclass(frozen=True)
class Staging:
    """Where `verify_at_once` puts tests/ (and the conversation beside it) before its exec,
    under a name no agent could guess: `inside`, the folder in the sandbox; `host`, the same
    folder on this host when it is in the sandbox's own slot folder (mounted read-only at
    `SLOT_DIR`), in a root-only folder of its own: written there, copied into place by the
    exec, no upload (an upload costs the engine about as much CPU as two execs). Else None:
    uploaded to a root-only folder at the root, moved into place."""

    inside: str
    host: Path | None = None

    @classmethod
    def for_sandbox(cls, sandbox: Sandbox) -> Staging:
        name = f"verifier-{token_hex(8)}"
        slot = sandbox.slot_folder if isinstance(sandbox, SlotSandbox) else None
        if slot is None:
            return cls(f"/.trialbox-{name}")
        return cls(f"{SLOT_DIR}/{name}/tests", slot / name / "tests")

    @property
    def leftovers(self) -> tuple[str, ...]:
        """What is left in the sandbox when the exec did not get to the tests' move."""
        if self.host is not None:
            return ()
        return self.inside, PrepareAndVerify.conversation_beside(self.inside)

    def write(self, tests_dir: Path, trajectory: bytes | None) -> None:
        """Into the slot folder (`host`): its own folder made root-only first, so nothing in
        it is ever readable by another user, then tests/ (0700, as /tests will be) and the
        conversation."""
        assert self.host is not None
        self.host.parent.mkdir(mode=0o700)
        shutil.copytree(tests_dir, self.host, symlinks=True)
        self.host.chmod(0o700)
        if trajectory is not None:
            conversation = Path(PrepareAndVerify.conversation_beside(str(self.host)))
            conversation.write_bytes(trajectory)
            conversation.chmod(0o644)

    def clear(self) -> None:
        """The slot folder's copies gone (the exec copied them): best effort."""
        assert self.host is not None
        shutil.rmtree(self.host.parent, ignore_errors=True)


async def verify_at_once(
    sandbox: Sandbox,
    tests_dir: Path,
    setup: VerifierSetup,
    limits: Limits,
    *,
    memory_mb: int,
    staging: Staging,
    trajectory: bytes | None = None,
) -> VerifiedAtOnce | None:
    """`prepare_verifier`, the copy of tests/ and `verify` as one root exec after tests/ was
    staged (`staging`; only where `fits_one_exec`); `trajectory`: the conversation to hand over.
    None when the prepare part did not finish (every pid taken, a folder it could not fix):
    go step by step then, removing `staging.leftovers`. Raises as `verify` does."""
    mark = f"trialbox-reward-{token_hex(8)}"
    command = PrepareAndVerify(
        PrepareVerifier(), RunVerifier(mark), staging.inside, hand_over=trajectory is not None,
        limit=(setup.timeout_sec, limits.exec_kill_after_sec), copied=staging.host is not None,
    )  # fmt: skip
    try:
        if staging.host is not None:
            await run_blocking(staging.write, tests_dir, trajectory)
        else:
            files = (
                {}
                if trajectory is None
                else {command.conversation.lstrip("/"): (trajectory, 0o644)}
            )
            tar = await run_blocking(
                tar_of_dir, tests_dir, staging.inside.lstrip("/"), top_mode=0o700, files=files
            )
            await sandbox.upload(tar, "/")
        outcome = await sandbox.exec(
            command, timeout_sec=limits.verifier_setup_sec + setup.timeout_sec, env=setup.env,
            user=setup.user,
        )  # fmt: skip
    except SandboxError as exc:
        cause = await explained(sandbox, exc, memory_mb=memory_mb)
        if cause is exc:
            raise
        raise cause from exc
    finally:
        if staging.host is not None:
            await run_blocking(staging.clear)
    before, prepared, after = outcome.output.partition(f"{mark} {command.PREPARED}\n")
    if not prepared:
        return None
    # The exec's own limit is longer (the prepare's time too): test.sh's is its inner one.
    limited = timed_out(setup.timeout_sec, outcome.exit_code, outcome.duration_sec)
    verified = _how_it_ended(outcome, after, mark, setup, timed_out=outcome.timed_out or limited)
    return VerifiedAtOnce(
        notes=_findings(before),
        run=await _judged(sandbox, verified, memory_mb),
        handed_over=f"{mark} {command.HANDED_OVER}" in before.splitlines(),
    )


def where_to_look(run: VerifierRun | None, logs_dir: Path) -> str:
    """For a missing reward: how tests/test.sh ended and the last line it printed (the usual
    cause is a crash before it wrote one), as words to add to the error."""
    if run is None:
        return ""
    output = logs_dir / "verifier" / "test-stdout.txt"
    try:
        with output.open("rb") as handle:
            handle.seek(max(0, output.stat().st_size - 2048))
            tail = handle.read().decode("utf-8", errors="replace").strip().splitlines()
    except OSError:
        tail = []
    last = f"; its last line: {tail[-1][:300]!r}" if tail else ""
    return (
        f"; tests/test.sh exited {run.exit_code}, its output is in "
        f"logs/verifier/test-stdout.txt{last}"
    )


async def score(run: VerifierRun | None, logs_dir: Path) -> tuple[dict[str, float], list[str]]:
    """The rewards as the files stood when tests/test.sh exited, and a warning per file whose
    collected copy differs; without a snapshot (no `od` in the image), the collected
    copy, with a warning saying so. Raises RewardFileError."""
    verifier_dir = logs_dir / "verifier"
    if run is None or run.snapshot is None:
        note = (
            "the reward was read from the collected copy of /logs/verifier, not as it stood "
            "when tests/test.sh exited (the verifier's exec printed no snapshot: is there no "
            "od in the image?): a process left running could have changed it"
        )
        return await read_rewards(verifier_dir), [note]
    rewards = run.snapshot.rewards()
    return rewards, await run_blocking(changed_after, run.snapshot, verifier_dir)
