"""Waiting for a sandbox to be ready before the agent starts: the task's healthcheck, or the
one its image declares, with Docker's HEALTHCHECK meaning (as Harbor runs it).

Bounded by its own numbers: the start period, then at most `retries` failed runs, each cut
at `timeout_sec`. A check that runs and keeps failing is the task's (`validation`: the agent
never ran, no sample); one that keeps timing out may be a loaded host (`infra`: retry).

`wait_ready` is the step.
"""

from __future__ import annotations

import asyncio
import time

from orchestrator.common.errors import HealthcheckFailedError, SandboxNotReadyError
from orchestrator.sandbox import Healthcheck, Sandbox

OUTPUT_SHOWN = 400  # characters of the last failed run kept in the error


async def wait_ready(sandbox: Sandbox, check: Healthcheck, *, where: str) -> float:
    """Run `check` until it passes; returns the seconds it took. `where` names the check's
    source (the task.toml field, or the image) in errors."""
    started = time.monotonic()
    start_period_ends = started + check.start_period_sec
    failures = 0
    while True:
        result = await sandbox.exec(check.command, timeout_sec=check.timeout_sec)
        if result.exit_code == 0:
            return time.monotonic() - started
        if time.monotonic() < start_period_ends:
            await asyncio.sleep(check.start_interval_sec)
            continue
        failures += 1
        if failures >= check.retries:
            break
        await asyncio.sleep(check.interval_sec)
    said = result.output.strip()[-OUTPUT_SHOWN:]
    if result.timed_out:
        raise SandboxNotReadyError(
            f"{where}: the healthcheck {check.command!r} timed out ({check.timeout_sec:g} s) "
            f"{failures} times in a row; the sandbox never became ready"
        )
    raise HealthcheckFailedError(
        f"{where}: the healthcheck {check.command!r} failed {failures} times in a row "
        f"(last exit code {result.exit_code}{f': {said}' if said else ''}); the sandbox "
        "never became ready, so the agent was not started"
    )
