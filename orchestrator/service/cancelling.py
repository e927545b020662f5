"""A cancel applied to the engine's rollouts: the selected live runners cancelled, the named
ids the engine does not know tombstoned, and a disposition for each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.service.inflight import InFlight
from orchestrator.service.rollouts import Disposition, RolloutStatus
from orchestrator.service.selection import select
from orchestrator.service.tombstones import Tombstones
from orchestrator.service.ttl_cache import TtlCache


def cancel_selected(
    live: Mapping[str, InFlight],
    finished: TtlCache[RolloutStatus],
    tombstones: Tombstones,
    *,
    ids: Iterable[str] | None,
    prefix: str | None,
    everything: bool,
    session_id: str | None,
    within: str | None,
) -> dict[str, Disposition]:
    """`TrialEngine.cancel_nowait` on the engine's state. Ids cancelled before their submit
    (neither live nor finished) are tombstoned: the late submit is refused, so a cancel that
    overtakes its submit still stops the rollout."""
    sessions = {i: r.request.session_id for i, r in live.items()}
    chosen = select(
        sessions, ids=ids, prefix=prefix, everything=everything, session_id=session_id,
        within=within,
    )  # fmt: skip
    for rollout_id in chosen.to_bury:
        if finished.get(rollout_id) is None:
            tombstones.bury(rollout_id, "cancelled by id before it was submitted")
    dispositions: dict[str, Disposition] = dict.fromkeys(chosen.missing, "not_found")
    for rollout_id in chosen.live:
        rollout = live[rollout_id]
        running = rollout.running
        if rollout.runner is not None and rollout.runner.cancel():
            dispositions[rollout_id] = "cancelled_running" if running else "cancelled_queued"
        else:
            dispositions[rollout_id] = "not_found"
    return dispositions
