"""The verifier step: score the agent's work in the very sandbox it worked in.

Whatever the agent wrote into /logs/verifier (a pre-written reward) goes first, and the new
folder is root's; `tests/` (which may hold the label) arrives only now, root-only. As in
Harbor, tests/test.sh runs as the task's `verifier.user`, else the image's USER, else root,
from the task's `environment.workdir`, else the image's WORKDIR. Run as root, an agent's
leftover processes running as another user can neither read the label nor write a reward.
Run as another user, /tests and /logs/verifier become that user's, so a leftover process of
the agent's running as that same user could: docs/harbor.md says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from container_runtime import paths
from orchestrator.common.archive import tar_of_dir, tar_of_files
from orchestrator.common.errors import (
    SandboxError,
    VerifierSetupError,
    VerifierTimeoutError,
)
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import Sandbox
from orchestrator.trials.faults import explained, free_pids, raise_if_going
from orchestrator.trials.rewards import read_rewards

VERIFIER_STDOUT = f"{paths.VERIFIER_DIR}/test-stdout.txt"
_RESET = (
    f"rm -rf {paths.VERIFIER_DIR} {paths.TESTS_DIR} && mkdir -p {paths.VERIFIER_DIR}"
    f" && chmod 0755 {paths.VERIFIER_DIR}"
)
_RUN = (
    f"exec >{VERIFIER_STDOUT} 2>&1 </dev/null; "
    f"$(command -v bash || echo sh) {paths.TESTS_DIR}/test.sh"
)


@dataclass(frozen=True)
class VerifierSetup:
    """How tests/test.sh is run: its time limit, its own variables, its user and that user's
    (uid, gid), resolved before the agent ran (`trials/users.py`)."""

    timeout_sec: float
    env: Mapping[str, str] = field(default_factory=dict)
    user: str = ""  # "": the image's USER
    owner: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class VerifierRun:
    """How tests/test.sh ended in the sandbox."""

    exit_code: int | None
    seconds: float


async def run_verifier(
    sandbox: Sandbox, tests_dir: Path, setup: VerifierSetup, limits: Limits
) -> VerifierRun:
    """Empty /logs/verifier, upload `tests_dir` as /tests (only its user may enter it: root,
    or the verifier's user), run tests/test.sh.

    Ownership comes with the upload (the engine extracts as itself), so no capability is
    needed inside the sandbox: an exec as root in an image whose USER is not root may have
    none. Raises VerifierSetupError when the sandbox cannot be prepared and
    VerifierTimeoutError when tests/test.sh overruns its timeout.
    """
    cleared = await sandbox.exec(_RESET, timeout_sec=limits.verifier_setup_sec, user="root")
    if cleared.exit_code != 0:
        raise VerifierSetupError(f"could not empty {paths.VERIFIER_DIR}: {cleared.output}")
    owner = setup.owner
    tests = await run_blocking(tar_of_dir, tests_dir, "tests", top_mode=0o700, owner=owner)
    await sandbox.upload(tests, "/")
    if owner != (0, 0):
        verifier_dir = paths.VERIFIER_DIR.lstrip("/")
        await sandbox.upload(tar_of_files({}, dirs={verifier_dir: 0o755}, owner=owner), "/")
    outcome = await sandbox.exec(
        _RUN, timeout_sec=setup.timeout_sec, env=setup.env, user=setup.user
    )
    if outcome.timed_out:
        raise VerifierTimeoutError(
            f"tests/test.sh ran past its verifier timeout ({setup.timeout_sec:g} s)"
        )
    return VerifierRun(exit_code=outcome.exit_code, seconds=outcome.duration_sec)


async def verify(
    sandbox: Sandbox, tests_dir: Path, setup: VerifierSetup, limits: Limits, *, memory_mb: int
) -> tuple[VerifierRun, list[str]]:
    """`run_verifier`, judged from outside when the sandbox fails it: pids held by the agent's
    leftovers are freed first (a note is returned), a sandbox that died is put in the category
    of its true cause. How tests/test.sh ended, and the notes."""
    notes: list[str] = []
    try:
        run = await run_verifier(sandbox, tests_dir, setup, limits)
    except (VerifierSetupError, SandboxError) as exc:
        freed = await free_pids(sandbox) if isinstance(exc, VerifierSetupError) else None
        if freed is None:
            cause = await explained(sandbox, exc, memory_mb=memory_mb)
            if cause is exc:
                raise
            raise cause from exc
        notes.append(freed)
        run = await run_verifier(sandbox, tests_dir, setup, limits)
    if run.exit_code is None or run.exit_code >= 128:  # killed: the sandbox too?
        what = f"tests/test.sh ended with {run.exit_code}"
        raise_if_going(await sandbox.health(), what=what, memory_mb=memory_mb)
    return run, notes


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


async def score(logs_dir: Path) -> dict[str, float]:
    """The rewards in the collected copy of /logs/verifier; raises RewardFileError."""
    return await read_rewards(logs_dir / "verifier")
