"""The verifier step: score the agent's work in the very sandbox it worked in.

Whatever the agent wrote into /logs/verifier (a pre-written reward) goes first, and the new
folder is root's; `tests/` (which may hold the label) arrives only now, root-only, and
tests/test.sh runs as root. So an agent's leftover processes running as another user can
neither read the label nor write a reward while the verifier runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from container_runtime import paths
from orchestrator.common.archive import tar_of_dir
from orchestrator.common.errors import (
    SandboxError,
    VerifierSetupError,
    VerifierTimeoutError,
)
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import Sandbox
from orchestrator.tasks.task import VerifierSection
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
class VerifierRun:
    """How tests/test.sh ended in the sandbox."""

    exit_code: int | None
    seconds: float


async def run_verifier(
    sandbox: Sandbox, tests_dir: Path, section: VerifierSection, limits: Limits
) -> VerifierRun:
    """Empty /logs/verifier, upload `tests_dir` as /tests (root-only), run tests/test.sh.

    Raises VerifierSetupError when the sandbox cannot be prepared and VerifierTimeoutError
    when tests/test.sh overruns its timeout.
    """
    cleared = await sandbox.exec(_RESET, timeout_sec=limits.verifier_setup_sec, user="root")
    if cleared.exit_code != 0:
        raise VerifierSetupError(f"could not empty {paths.VERIFIER_DIR}: {cleared.output}")
    tests = await run_blocking(tar_of_dir, tests_dir, "tests", top_mode=0o700)
    await sandbox.upload(tests, "/")
    outcome = await sandbox.exec(
        _RUN,
        timeout_sec=section.timeout_sec,
        env=section.env,
        user="root",
        workdir=paths.TESTS_DIR,
    )
    if outcome.timed_out:
        raise VerifierTimeoutError(
            f"tests/test.sh ran past its verifier timeout ({section.timeout_sec:g} s)"
        )
    return VerifierRun(exit_code=outcome.exit_code, seconds=outcome.duration_sec)


async def verify(
    sandbox: Sandbox, tests_dir: Path, section: VerifierSection, limits: Limits, *, memory_mb: int
) -> list[str]:
    """`run_verifier`, judged from outside when the sandbox fails it: pids held by the agent's
    leftovers are freed first (a note is returned), a sandbox that died is put in the category
    of its true cause."""
    notes: list[str] = []
    try:
        run = await run_verifier(sandbox, tests_dir, section, limits)
    except (VerifierSetupError, SandboxError) as exc:
        freed = await free_pids(sandbox) if isinstance(exc, VerifierSetupError) else None
        if freed is None:
            cause = await explained(sandbox, exc, memory_mb=memory_mb)
            if cause is exc:
                raise
            raise cause from exc
        notes.append(freed)
        run = await run_verifier(sandbox, tests_dir, section, limits)
    if run.exit_code is None or run.exit_code >= 128:  # killed: the sandbox too?
        what = f"tests/test.sh ended with {run.exit_code}"
        raise_if_going(await sandbox.health(), what=what, memory_mb=memory_mb)
    return notes


async def score(logs_dir: Path) -> dict[str, float]:
    """The rewards in the collected copy of /logs/verifier; raises RewardFileError."""
    return await read_rewards(logs_dir / "verifier")
