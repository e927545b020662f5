"""Waiting for cleanup to finish even while cancels arrive: the one loop every teardown uses.

Teardown must run to its end (or its bound) whatever cancelled what; the cancellation is
then passed on. Callers re-raise when this reports that a cancel arrived.

`ride_out_cancels` awaits a task to its end, absorbing cancels meanwhile and saying whether one
came; `RunOnce` runs a cleanup once however many callers ask, each waiting for the same end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def ride_out_cancels(task: asyncio.Future[Any], limit: float | None = None) -> bool:
    """Wait until `task` ends (or `limit` seconds pass), absorbing cancels meanwhile.

    Returns True when at least one cancel arrived, so the caller re-raises it.
    """
    cancelled = False
    deadline = None if limit is None else time.monotonic() + limit
    while not task.done():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        try:
            await asyncio.wait({task}, timeout=remaining)
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


async def finish_shielded(finish: Awaitable[None], *, cancelled: bool) -> None:
    """Run a trial's finishing steps to their end whatever cancels arrive meanwhile, then
    re-raise a cancel if one came (now, or before: `cancelled`), else any error they raised.
    Each step is bounded, so riding out the cancels cannot hang."""
    task = asyncio.ensure_future(finish)
    if await ride_out_cancels(task):
        cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


class RunOnce:
    """A cleanup that runs once however many callers ask, each waiting (bounded) for it to
    finish before a cancellation of theirs goes on: how a sandbox is destroyed."""

    def __init__(self, step: Callable[[], Awaitable[None]], settle_sec: float) -> None:
        self._step = step
        self._settle_sec = settle_sec
        self._task: asyncio.Future[None] | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    async def __call__(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._step())
        if await ride_out_cancels(self._task, self._settle_sec):
            raise asyncio.CancelledError
        if self._task.done():
            self._task.result()  # a failed cleanup is the caller's to hear about
