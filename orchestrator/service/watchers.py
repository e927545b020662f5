"""Long polls: a status answered when it changes, woken by the engine, never by polling.

A trainer waiting on many rollouts would otherwise poll each one, costing a request per
rollout per interval and learning of a change up to an interval late. Instead each long poll
parks a future under its rollout id, and the engine calls `notify` on every transition
(submitted, slot taken, grading, settled, tombstoned); the woken poll reads the status again
and answers if it differs. The number held at once is bounded, so idle clients cannot pile
up futures without end.

`Watchers` holds them; `watch` parks one, `notify` wakes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.service.rollouts import RolloutStatus, TooManyLongPolls
from orchestrator.service.status import FINAL

DEFAULT_MAX_LONG_POLLS = 1024


class Watchers:
    """The long polls waiting now, at most `max_count`. `read(rollout_id)` is the status a
    poll compares; once `closed()` is true a woken poll answers whatever it reads."""

    def __init__(
        self,
        max_count: int,
        read: Callable[[str], RolloutStatus],
        closed: Callable[[], bool],
    ) -> None:
        self.max_count = max_count
        self._read = read
        self._closed = closed
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._count = 0

    @property
    def count(self) -> int:
        """Long polls waiting now."""
        return self._count

    def notify(self, rollout_id: str) -> None:
        """Wake the long polls of `rollout_id`: its status may have changed."""
        for waiter in self._waiters.pop(rollout_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def notify_all(self) -> None:
        """Wake every long poll (at shutdown: nothing more will change)."""
        for rollout_id in list(self._waiters):
            self.notify(rollout_id)

    async def watch(self, rollout_id: str, wait_sec: float) -> RolloutStatus:
        """The status once it differs from the status now, or after `wait_sec` seconds.

        A settled outcome is returned at once (only its expiry could change it), and so is
        any status when `wait_sec` is not positive. Raises `TooManyLongPolls` past
        `max_count`. A wake-up that finds the status unchanged waits again for the rest of
        the time: `notify` says "may have changed", not "has changed".
        """
        first = self._read(rollout_id)
        if wait_sec <= 0 or (first.status in FINAL and first.finished_at is not None):
            return first
        if self._count >= self.max_count:
            raise TooManyLongPolls(f"{self._count} long polls are waiting; poll again")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_sec
        self._count += 1
        try:
            while True:
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.setdefault(rollout_id, set()).add(waiter)
                try:
                    await asyncio.wait_for(waiter, max(0.0, deadline - loop.time()))
                except TimeoutError:
                    return self._read(rollout_id)
                finally:
                    waiting = self._waiters.get(rollout_id)
                    if waiting is not None:
                        waiting.discard(waiter)
                        if not waiting:
                            del self._waiters[rollout_id]
                now = self._read(rollout_id)
                if now.status != first.status or self._closed() or loop.time() >= deadline:
                    return now
        finally:
            self._count -= 1
