"""The abort hook for trainers: stop only the in-flight trials of one scope.

An RL trainer oversamples rollouts and aborts the surplus once it has enough; without a hook
those trials keep holding sandboxes. `abort(scope)` cancels every live rollout whose id starts
with `scope` or whose session_id equals it, and ends every live session (`open_session`) whose id
starts with `scope`, in every engine of this process, and leaves other scopes' trials running.
It may be called from any thread, including a trainer's own loop.

The scope is also tombstoned in each engine for its `abort_tombstone_sec` (60 s by default):
a surplus rollout of that scope submitted after the abort (a request already on its way) is
refused with `RolloutTombstoned` and never starts; its id reads `cancelled`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

from orchestrator.service.engine import TrialEngine, engines
from orchestrator.service.rollouts import Disposition


def _abort_in(engine: TrialEngine, scope: str) -> dict[str, Disposition]:
    by_prefix = engine.cancel_nowait(prefix=scope)
    by_session = engine.cancel_nowait(session_id=scope)
    sessions = engine.abort_sessions_nowait(scope, f"aborted: abort({scope!r})")
    return {**by_session, **by_prefix, **sessions}


def abort(scope: str, timeout_sec: float = 10.0) -> dict[str, Disposition]:
    """Cancel the live rollouts of `scope` (an id prefix or a session id); returns dispositions.

    The cancellations are host aborts through the relay: each trial ends as cancelled and its
    sandbox is removed, except one already finishing (verified, or a phase failed: answered
    `finishing`), which keeps its outcome. This returns once the cancellations are requested,
    not finished.
    Rollouts of `scope` submitted afterwards, within each engine's `abort_tombstone_sec`,
    are refused (the tombstone is recorded first, so none slips in between).
    """
    if not scope:
        raise ValueError("abort needs a non-empty scope; cancel everything with cancel(all=True)")
    dispositions: dict[str, Disposition] = {}
    for engine in engines():
        engine.tombstone_scope(scope)
        loop = engine.loop
        if loop is None or loop.is_closed():
            continue
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            dispositions.update(_abort_in(engine, scope))
            continue
        future = asyncio.run_coroutine_threadsafe(_async_abort(engine, scope), loop)
        try:
            dispositions.update(future.result(timeout=timeout_sec))
        except concurrent.futures.TimeoutError:
            future.cancel()
    return dispositions


async def _async_abort(engine: TrialEngine, scope: str) -> dict[str, Disposition]:
    return _abort_in(engine, scope)
