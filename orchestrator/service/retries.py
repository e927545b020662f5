"""Trials that end in `infra` are tried again: the sample said nothing about the agent (the
engine failed, the sandbox was killed from outside), so it is discarded and rerun.

Never an `agent`, `verifier` or `validation` failure: those are the agent's or the task's
doing, and a rerun would only fish for a better score.

`Backoff` is the wait between tries; `with_retries` the tenacity loop, for a job's trials and a
served rollout's (`max_retries`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
)

from orchestrator.jobs.aggregates import is_infra
from orchestrator.trials.result import TrialResult


@dataclass(frozen=True)
class Backoff:
    """The wait before a retry: `first_sec`, doubling, at most `max_sec` (both 0 in tests)."""

    first_sec: float = 1.0
    max_sec: float = 30.0

    def __post_init__(self) -> None:
        if self.first_sec < 0 or self.max_sec < self.first_sec:
            raise ValueError("a backoff needs 0 <= first_sec <= max_sec")


async def with_retries(
    run: Callable[[], Awaitable[TrialResult]],
    *,
    max_retries: int,
    backoff: Backoff,
    stopping: asyncio.Event,
) -> TrialResult:
    """`run()` once, and again while it ends in infra, up to `max_retries` more times; the
    last result is returned. Once `stopping` is set (the job is being cancelled) no retry
    starts, and a backoff under way ends at once."""
    last: TrialResult | None = None

    async def attempt() -> TrialResult:
        nonlocal last
        if last is None or not stopping.is_set():
            last = await run()
        return last

    async def pause(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)

    def give_up(state: RetryCallState) -> TrialResult:
        assert state.outcome is not None
        return state.outcome.result()

    retrying = AsyncRetrying(
        stop=stop_after_attempt(max_retries + 1),
        wait=wait_exponential(multiplier=backoff.first_sec, max=backoff.max_sec),
        retry=retry_if_result(lambda result: is_infra(result) and not stopping.is_set()),
        sleep=pause,
        retry_error_callback=give_up,
    )
    return await retrying(attempt)
