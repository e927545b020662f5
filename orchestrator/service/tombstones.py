"""Tombstones: rollout ids and abort scopes that must not start, for a bounded while.

Two races need them. A cancel by id can overtake its own submit (the trainer's cancel and
submit travel separately), and an `abort(scope)` can come before the last surplus submits of
its scope are in. Without a memory of either, the late submit would start a rollout nobody
wants. So a cancelled id that is not live is kept for the retention window, and an aborted
scope for `abort_tombstone_sec`; a submit that meets either is refused (`RolloutTombstoned`)
and its id reads `cancelled`. Both are bounded in count, the oldest going first, so a client
cancelling made-up ids cannot grow the server's memory without end.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from orchestrator.service.rollouts import RolloutRequest, RolloutStatus
from orchestrator.service.status import cancelled_status

DEFAULT_ABORT_TOMBSTONE_SEC = 60.0
DEFAULT_MAX_TOMBSTONES = 10_000
MAX_ABORTED_SCOPES = 1024


class _Expiring:
    """Keys kept for `ttl_sec` each and at most `max_items` of them (the oldest go first).

    Thread-safe: `abort` records scopes from the trainer's thread while the engine's loop
    reads them.
    """

    def __init__(self, ttl_sec: float, max_items: int, clock: Callable[[], float]) -> None:
        self.ttl_sec = ttl_sec
        self.max_items = max_items
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, RolloutStatus | None]] = OrderedDict()
        self._lock = threading.Lock()

    def _prune(self) -> None:
        now = self._clock()
        while self._items:
            key, (expires, _) = next(iter(self._items.items()))
            if expires > now:
                break
            del self._items[key]

    def set(self, key: str, value: RolloutStatus | None = None) -> None:
        if self.ttl_sec <= 0 or self.max_items <= 0:
            return
        with self._lock:
            self._prune()
            self._items.pop(key, None)
            self._items[key] = (self._clock() + self.ttl_sec, value)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def get(self, key: str) -> RolloutStatus | None:
        with self._lock:
            self._prune()
            item = self._items.get(key)
            return None if item is None else item[1]

    def keys(self) -> list[str]:
        with self._lock:
            self._prune()
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._items)


class Tombstones:
    """The engine's tombstoned ids (each for `id_ttl_sec`, at most `max_ids`) and aborted
    scopes (each for `scope_ttl_sec`). `on_bury(rollout_id)` runs when an id is tombstoned:
    what the id reads has changed, so its long polls must wake."""

    def __init__(
        self,
        *,
        id_ttl_sec: float,
        max_ids: int,
        scope_ttl_sec: float,
        clock: Callable[[], float],
        on_bury: Callable[[str], None],
    ) -> None:
        self.scope_ttl_sec = scope_ttl_sec
        self._ids = _Expiring(id_ttl_sec, max_ids, clock)
        self._scopes = _Expiring(scope_ttl_sec, MAX_ABORTED_SCOPES, clock)
        self._on_bury = on_bury

    def get(self, rollout_id: str) -> RolloutStatus | None:
        """The `cancelled` document of a tombstoned id, else None."""
        return self._ids.get(rollout_id)

    def bury(self, rollout_id: str, why: str) -> RolloutStatus:
        """Tombstone an id: it reads `cancelled` and a submit of it is refused."""
        tombstone = cancelled_status(rollout_id, why)
        self._ids.set(rollout_id, tombstone)
        self._on_bury(rollout_id)
        return tombstone

    def bury_scope(self, scope: str) -> None:
        """Refuse the scope's rollouts for `scope_ttl_sec` (safe from any thread)."""
        self._scopes.set(scope)

    def bury_if_aborted(self, request: RolloutRequest) -> RolloutStatus | None:
        """If the request falls in a scope aborted lately (its id starts with the scope, or
        its session_id is the scope), tombstone its id and return the tombstone."""
        for scope in self._scopes.keys():
            if request.rollout_id.startswith(scope) or request.session_id == scope:
                why = (
                    f"its scope {scope!r} was aborted; rollouts of an aborted scope submitted "
                    f"within {self.scope_ttl_sec:g} s of the abort do not start"
                )
                return self.bury(request.rollout_id, why)
        return None
