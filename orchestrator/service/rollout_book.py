"""The engine's book of rollouts: every id it knows and what it knows of it.

One object instead of four loose containers, so admission, cancel and status read the same
state the same way: the live rollouts (queued or holding a slot), the outcomes settled within
retention, the tombstones (ids cancelled before their submit, scopes an abort refused), the
disposition each live rollout's first cancel was given, and whether the engine is closing.
The engine writes it (submit, settle, shutdown); the rest only reads it, cancel aside, which
records its answers and tombstones.

`RolloutBook` is the class: `status(id)` reads a rollout as the engine knows it, `settle` moves
it from live to settled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.service.inflight import InFlight
from orchestrator.service.rollouts import Disposition, RolloutStatus
from orchestrator.service.status import live_status
from orchestrator.service.tombstones import Tombstones
from orchestrator.service.ttl_cache import TtlCache


@dataclass
class RolloutBook:
    """What the engine knows of each rollout id (see the module's docstring)."""

    settled: TtlCache[RolloutStatus]
    tombstones: Tombstones
    live: dict[str, InFlight] = field(default_factory=dict)
    cancel_answers: dict[str, Disposition] = field(default_factory=dict)
    closed: bool = False

    @property
    def waiting(self) -> int:
        """Rollouts accepted but not yet holding a slot."""
        return sum(1 for rollout in self.live.values() if not rollout.running)

    def status(self, rollout_id: str) -> RolloutStatus:
        """queued / running / grading while live; the outcome while retained; cancelled while
        tombstoned; else unknown."""
        rollout = self.live.get(rollout_id)
        if rollout is not None:
            return live_status(rollout_id, rollout.live, rollout.retried)
        settled = self.settled.get(rollout_id)
        if settled is not None:
            return settled
        tombstone = self.tombstones.get(rollout_id)
        return tombstone or RolloutStatus(rollout_id=rollout_id, status="unknown")

    def settle(self, rollout: InFlight, status: RolloutStatus) -> None:
        """The rollout is done: no longer live (if it still was), its outcome retained."""
        rollout_id = rollout.request.rollout_id
        if self.live.get(rollout_id) is rollout:
            del self.live[rollout_id]
            self.cancel_answers.pop(rollout_id, None)
        self.settled.set(rollout_id, status)
