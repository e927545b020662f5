"""The orphan timer (`orphan_timeout_sec`, `serve --orphan-timeout`): a live rollout nobody
has asked about for that long is cancelled, so a trainer that died, or a DELETE that was lost,
never holds a sandbox for long.

A rollout is watched while someone shows interest in its id: a submit (also a repeated one),
a status read, and a long poll (`watch`) or a `wait`, which count for their whole duration
and restart the timer when they end. Once nothing has touched it for the timeout, it is
cancelled through the engine's ordinary cancel, which reaches a running trial as a host abort
through the relay, and its status document's `error` says why (a local trial's result.json
carries it as a warning). It is judged once: a rollout already past its phases (`finishing`)
ends with its own outcome. Off unless a timeout is given.

`OrphanWatch` keeps, for each live rollout, when its id was last asked about, and cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from orchestrator.service.rollouts import RolloutStatus

log = logging.getLogger(__name__)

MAX_TICK_SEC = 1.0  # how late past its timeout a rollout may be judged, at most


def orphan_reason(timeout_sec: float) -> str:
    return (
        f"orphaned: nobody submitted, polled or long-polled it for {timeout_sec:g} s "
        "(orphan timeout), so it was cancelled"
    )


class OrphanWatch:
    """When each live rollout was last asked about. `expire(rollout_id, reason)` cancels one
    whose time is up; `clock` is the engine's monotonic clock (tests step it)."""

    def __init__(
        self,
        timeout_sec: float | None,
        clock: Callable[[], float],
        expire: Callable[[str, str], None],
    ) -> None:
        if timeout_sec is not None and not timeout_sec > 0:
            raise ValueError("orphan_timeout_sec must be more than 0, or None for no timer")
        self.timeout_sec = timeout_sec
        self._clock, self._expire = clock, expire
        self._last: dict[str, float] = {}  # live rollouts not yet judged: last touched at
        self._held: dict[str, int] = {}  # long polls and waits in progress, by rollout
        self._expired: dict[str, str] = {}  # cancelled by the timer: why
        self._ticker: asyncio.Task[None] | None = None

    def track(self, rollout_id: str) -> None:
        """A rollout was accepted: its timer starts now (and the ticker, the first time)."""
        if self.timeout_sec is None:
            return
        self._last[rollout_id] = self._clock()
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick(), name="orphan-timer")

    def touch(self, rollout_id: str) -> None:
        """Someone asked about `rollout_id`: its timer starts again."""
        if rollout_id in self._last:
            self._last[rollout_id] = self._clock()

    @contextlib.contextmanager
    def held(self, rollout_id: str) -> Iterator[None]:
        """A long poll or wait on `rollout_id`: watched throughout, touched when it ends."""
        self._held[rollout_id] = self._held.get(rollout_id, 0) + 1
        try:
            yield
        finally:
            self._held[rollout_id] -= 1
            if not self._held[rollout_id]:
                del self._held[rollout_id]
            self.touch(rollout_id)

    def expired(self) -> list[str]:
        """The rollouts whose time is up now (none is held)."""
        if self.timeout_sec is None:
            return []
        now = self._clock()
        return [
            rollout_id
            for rollout_id, last in self._last.items()
            if rollout_id not in self._held and now - last >= self.timeout_sec
        ]

    def sweep(self) -> list[str]:
        """Cancel (through `expire`) every rollout whose time is up; returns their ids."""
        found = self.expired()
        for rollout_id in found:
            assert self.timeout_sec is not None
            reason = self._expired[rollout_id] = orphan_reason(self.timeout_sec)
            del self._last[rollout_id]  # judged once
            self._expire(rollout_id, reason)
        return found

    def settled(self, rollout_id: str, status: RolloutStatus) -> RolloutStatus:
        """The rollout has settled with `status`: forget it; a cancel the timer made says why."""
        self._last.pop(rollout_id, None)
        reason = self._expired.pop(rollout_id, None)
        if reason is None or status.status != "cancelled":
            return status
        return status.model_copy(update={"error": reason})

    async def _tick(self) -> None:
        assert self.timeout_sec is not None
        period = min(self.timeout_sec / 4, MAX_TICK_SEC)
        while True:
            await asyncio.sleep(period)
            try:
                self.sweep()
            except Exception:  # a bug: say so, and keep the timer going
                log.exception("the orphan timer failed")

    async def aclose(self) -> None:
        """Stop the timer (the engine's shutdown aborts what is left anyway)."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
