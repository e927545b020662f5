"""Tombstones: rollout ids and abort scopes that must not start, for a bounded while.

Two races need them. A cancel by id can overtake its own submit (the trainer's cancel and
submit travel separately), and an `abort(scope)` can come before the last surplus submits of
its scope are in. Without a memory of either, the late submit would start a rollout nobody
wants. So a cancelled id that is not live is kept for the retention window, and an aborted
scope for `abort_tombstone_sec`; a submit that meets either is refused (`RolloutTombstoned`)
and its id reads `cancelled`. Both are bounded in count, the oldest going first, so a client
cancelling made-up ids cannot grow the server's memory without end.

`Tombstones` keeps both, in two `TtlCache`s.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.service.rollouts import RolloutRequest, RolloutStatus
from orchestrator.service.status import cancelled_status
from orchestrator.service.ttl_cache import TtlCache

DEFAULT_ABORT_TOMBSTONE_SEC = 60.0
DEFAULT_MAX_TOMBSTONES = 10_000
MAX_ABORTED_SCOPES = 1024


class _Nothing:
    """Tombstones turned off (a ttl or a count of 0): nothing is kept."""

    def set(self, key: str, value: RolloutStatus | None) -> None:
        pass

    def get(self, key: str) -> RolloutStatus | None:
        return None

    def keys(self) -> list[str]:
        return []


_Kept = TtlCache[RolloutStatus | None] | _Nothing


def _expiring(ttl_sec: float, max_items: int, clock: Callable[[], float]) -> _Kept:
    """Keys kept for `ttl_sec` each, at most `max_items` (the oldest go first); nothing is
    kept when either is 0. Thread-safe: `abort` records scopes from the trainer's thread
    while the engine's loop reads them."""
    if ttl_sec <= 0 or max_items <= 0:
        return _Nothing()
    return TtlCache(ttl_sec, clock, max_items=max_items)


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
        self._ids = _expiring(id_ttl_sec, max_ids, clock)
        self._scopes = _expiring(scope_ttl_sec, MAX_ABORTED_SCOPES, clock)
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
        self._scopes.set(scope, None)

    def aborted_scope(self, rollout_id: str) -> str | None:
        """The scope aborted lately that `rollout_id` falls in (it starts with it), if any."""
        return next((scope for scope in self._scopes.keys() if rollout_id.startswith(scope)), None)

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
