"""Waiting for cleanup to finish even while cancels arrive: the one loop every teardown uses.

Teardown must run to its end (or its bound) whatever cancelled what; the cancellation is
then passed on. Callers re-raise when this reports that a cancel arrived.
"""

from __future__ import annotations

import asyncio
import time


async def ride_out_cancels(task: asyncio.Future[object], limit: float | None = None) -> bool:
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
