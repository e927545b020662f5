"""Which rollouts the engine takes, and how long a refused one should wait.

Apart from the engine's lifecycle because it is a rule of its own: a submit is refused, in
this order, when its id is live, tombstoned or finished within retention, when the engine is
closing, when its scope was aborted lately, or when the waiting line is full. A full line
answers with a retry-after from the mean trial time, so a trainer backs off instead of work
silently piling up.

`Admission.check` is the rule, reading the `RolloutBook`; `retry_after` the answer.
"""

from __future__ import annotations

import math

from orchestrator.service.rollout_book import RolloutBook
from orchestrator.service.rollouts import (
    DuplicateRollout,
    EngineClosed,
    QueueFull,
    RolloutFinished,
    RolloutRequest,
    RolloutTombstoned,
)
from orchestrator.trials.result import TrialResult

FIRST_GUESS_TRIAL_SEC = 10.0  # the mean trial time before any trial has settled
MAX_RETRY_AFTER_SEC = 300


class Admission:
    """The engine's refusals, and the mean trial time its retry-after hints come from."""

    def __init__(self, n_concurrent: int, max_queue_depth: int | None) -> None:
        self.n_concurrent = n_concurrent
        self.max_queue_depth = max_queue_depth
        self.mean_trial_sec = FIRST_GUESS_TRIAL_SEC

    def retry_after(self, waiting: int) -> int:
        """Seconds until a slot is likely free for one more behind the `waiting` ones."""
        line = waiting + 1
        estimate = math.ceil(self.mean_trial_sec * line / self.n_concurrent)
        return max(1, min(MAX_RETRY_AFTER_SEC, estimate))

    def observe(self, result: TrialResult) -> None:
        """A settled trial's time moves the mean (finished trials only)."""
        if result.status in ("success", "failure") and result.timings.total > 0:
            self.mean_trial_sec = 0.8 * self.mean_trial_sec + 0.2 * result.timings.total

    def check(self, request: RolloutRequest, book: RolloutBook, sessions: int = 0) -> None:
        """Refuse a rollout the engine will not take: an id it knows (live, tombstoned or
        finished), closing, a scope aborted lately, a full queue. `sessions`: the live
        sessions, each holding one of the slots the rollouts would wait for."""
        rollout_id = request.rollout_id
        if rollout_id in book.live:
            raise DuplicateRollout(
                f"rollout {rollout_id!r} is still in flight", book.status(rollout_id)
            )
        tombstone = book.tombstones.get(rollout_id)
        if tombstone is not None:
            raise RolloutTombstoned(
                f"rollout {rollout_id!r} will not run: {tombstone.error}", tombstone
            )
        done = book.settled.get(rollout_id)
        if done is not None:
            raise RolloutFinished(
                f"rollout {rollout_id!r} already finished ({done.status}); it does not run again",
                done,
            )
        if book.closed:
            raise EngineClosed("the engine is shutting down; no new rollouts are accepted")
        tombstone = book.tombstones.bury_if_aborted(request)
        if tombstone is not None:
            raise RolloutTombstoned(
                f"rollout {rollout_id!r} will not run: {tombstone.error}", tombstone
            )
        if self.max_queue_depth is None:
            return
        would_wait = max(0, len(book.live) + sessions + 1 - self.n_concurrent)
        if would_wait > self.max_queue_depth:
            raise QueueFull(self.retry_after(book.waiting), book.waiting)
