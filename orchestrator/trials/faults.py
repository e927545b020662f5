"""Whose fault was it? The category of a sandbox failure, from the engine's account.

For an RL trainer the category is the data: `infra` is discarded and retried, `agent` counts.
So a sandbox that broke is judged from outside (the engine's events and state, no exec):
the agent exhausting its sandbox (memory, every pid) is the agent's doing and counts; the
sandbox killed or removed through the engine, or an engine that does not answer, is infra.

`classify` gives a failure's category from the sandbox's `Health`; `after_agent` reads the
sandbox once the agent ended (still there? an OOM kill as a warning); `free_pids` frees pids
from the host; `explained` tells a setup that failed for the agent's doing from the engine's.
"""

from __future__ import annotations

import asyncio

from orchestrator.common.errors import (
    AgentResourceError,
    SandboxLostError,
    TrialboxError,
    VerifierSetupError,
)
from orchestrator.sandbox import Health, Sandbox


def oom_note(health: Health, memory_mb: int) -> str | None:
    """A warning for memory kills that did not end the trial (the agent went on, say)."""
    if health.oom_kills <= 0:
        return None
    return (
        f"the sandbox ran out of memory: the kernel's OOM killer acted ({health.oom_kills} "
        f"event(s); the task allows memory_mb={memory_mb})"
    )


def storage_note(health: Health) -> str:
    """What a sandbox stopped at its disk limit wrote, and the limit (storage_mb)."""
    return (
        f"the agent filled its disk: the sandbox wrote {health.storage_used_mb} MiB, the task "
        f"allows storage_mb={health.storage_limit_mb}; the sandbox was stopped there, so the "
        "host's disk was not filled"
    )


def classify(health: Health, *, what: str, memory_mb: int) -> TrialboxError | None:
    """The true cause of `what` failing, or None when the engine's account explains nothing
    (the original error then stands). A sandbox stopped at its disk limit comes first: the
    backend killed it for that (the agent's doing, as its leftovers' are while the verifier
    runs), whatever the engine says since."""
    if health.storage_exceeded:
        note = storage_note(health)
        return AgentResourceError(f"{what}: {note}", warnings=(note,))
    if not health.known:
        return SandboxLostError(f"{what}: the engine did not answer about the sandbox")
    if health.stopped_outside or not health.exists:  # whatever the agent did before
        return SandboxLostError(
            f"{what}: the sandbox was killed or removed from outside (not by this trial)"
        )
    if health.oom_kills > 0 and (health.died_inside or not health.running):
        return AgentResourceError(
            f"{what}: the sandbox ran out of memory ({health.oom_kills} OOM kill(s); the task "
            f"allows memory_mb={memory_mb})"
        )
    if health.pids_exhausted:
        return AgentResourceError(
            f"{what}: the agent's processes hold every pid the sandbox allows "
            f"({health.pids_current} of {health.pids_limit})"
        )
    if health.died_inside:
        return AgentResourceError(f"{what}: the sandbox stopped from inside")
    return None


# An agent killed amid OOM kills may have been killed with its sandbox: the engine logs the
# sandbox's death a moment after the exec returns, so the account is read again this long.
OOM_SETTLE_SEC = 1.0
OOM_SETTLE_POLL_SEC = 0.1


async def after_agent(sandbox: Sandbox, exit_code: int | None, *, memory_mb: int) -> str | None:
    """After an agent that ended by itself: the sandbox must still be there to verify it
    (else the cause is raised); memory kills that did not end it are a note (returned)."""
    health = await sandbox.health()
    if not health.known and not health.storage_exceeded:
        return None  # no answer now: the verifier will find out, and say
    killed = exit_code is None or exit_code >= 128
    deadline = asyncio.get_running_loop().time() + OOM_SETTLE_SEC
    while killed and health.oom_kills > 0 and health.running and not health.died_inside:
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(OOM_SETTLE_POLL_SEC)
        again = await sandbox.health()
        if not again.known:
            break
        health = again
    raise_if_going(health, what=f"the agent ended ({exit_code}) with its sandbox",
                   memory_mb=memory_mb)  # fmt: skip
    return oom_note(health, memory_mb=memory_mb)


def raise_if_going(health: Health, *, what: str, memory_mb: int) -> None:
    """After a process in the sandbox ended oddly: the sandbox's true cause is raised when
    the engine was asked to kill it or it died (the engine logs a kill the moment it is asked,
    before the sandbox is down), or SandboxLostError when it is simply not running."""
    cause = classify(health, what=what, memory_mb=memory_mb)
    if cause is not None:
        raise cause
    if not (health.exists and health.running):
        raise SandboxLostError(what)


async def free_pids(sandbox: Sandbox) -> str | None:
    """When the agent's leftovers hold every pid, nothing can run the verifier: stop them
    from the host, so the agent's work is still scored; a note saying so, or None."""
    health = await sandbox.health(pids=True)
    if not health.pids_exhausted or not await sandbox.stop_all_from_host():
        return None
    return (
        f"the agent's processes held every pid the sandbox allows ({health.pids_current} of "
        f"{health.pids_limit}); they were killed from the host so the verifier could run"
    )


async def explained(sandbox: Sandbox, exc: Exception, *, memory_mb: int) -> Exception:
    """`exc`, or its true cause by the engine's account of the sandbox. A sandbox that runs,
    untouched from outside, yet cannot empty /logs/verifier was broken from inside (an agent
    that removed `rm` or `sh`, say): the sample counts."""
    health = await sandbox.health(pids=True)
    cause = classify(health, what=str(exc).strip(), memory_mb=memory_mb)
    if cause is None and isinstance(exc, VerifierSetupError) and health.running:
        cause = AgentResourceError(
            f"{str(exc).strip()} — the sandbox runs and was not touched from outside, so the "
            "agent left it unable to run the verifier's setup"
        )
    return cause or exc
