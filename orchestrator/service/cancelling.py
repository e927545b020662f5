"""A cancel applied to the engine's rollouts: the selected live runners cancelled, the named
ids the engine does not know tombstoned, and a disposition for each.

A disposition is a promise about how the rollout ends, so a trainer may count on it:
`cancelled_queued` and `cancelled_running` end `cancelled`; `finishing` ends with its own
outcome (`success` or `failure`), because the cancel came too late. A trial is too late to
cancel once its phases are over: the finishing steps (collect, score, tear down, write
`result.json`) are shielded and end it with the result it already has, so a scored trial stays
scored (`trials/trial.py` `finish`). Such a rollout is left to finish, not cancelled.

`cancel_selected` applies one; `finishing` says a rollout is past its phases.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.service.inflight import InFlight
from orchestrator.service.rollout_book import RolloutBook
from orchestrator.service.rollouts import Disposition
from orchestrator.service.selection import select
from orchestrator.service.status import FINAL
from orchestrator.trials.result import TrialResult


def cancel_selected(
    book: RolloutBook,
    *,
    ids: Iterable[str] | None,
    prefix: str | None,
    everything: bool,
    session_id: str | None,
    within: str | None,
) -> dict[str, Disposition]:
    """`TrialEngine.cancel_nowait` on the engine's state. Ids cancelled before their submit
    (neither live nor finished) are tombstoned: the late submit is refused, so a cancel that
    overtakes its submit still stops the rollout.

    The book's `cancel_answers` hold the disposition each live rollout was first given
    (forgotten when it settles): a cancel repeated (a retry whose answer was lost, an abort
    matching both a rollout's prefix and its session) answers as the first did."""
    live, answered = book.live, book.cancel_answers
    sessions = {i: r.request.session_id for i, r in live.items()}
    chosen = select(
        sessions, ids=ids, prefix=prefix, everything=everything, session_id=session_id,
        within=within,
    )  # fmt: skip
    for rollout_id in chosen.to_bury:
        if book.settled.get(rollout_id) is None:
            book.tombstones.bury(rollout_id, "cancelled by id before it was submitted")
    dispositions: dict[str, Disposition] = dict.fromkeys(chosen.missing, "not_found")
    for rollout_id in chosen.live:
        disposition = answered.get(rollout_id) or _cancel(live[rollout_id])
        if disposition != "not_found":
            answered[rollout_id] = disposition
        dispositions[rollout_id] = disposition
    return dispositions


def _cancel(rollout: InFlight) -> Disposition:
    """Cancel one live rollout, unless its trial is already finishing, and say which."""
    runner = rollout.runner
    if runner is None or runner.done():
        return "not_found"
    live = rollout.live
    if live is not None and finishing(live):
        rollout.no_retry.set()  # the outcome stands: an infra one is not tried again
        return "finishing"  # a cancel now would be ridden out
    runner.cancel()
    return "cancelled_queued" if live is None else "cancelled_running"


def finishing(result: TrialResult) -> bool:
    """Whether the trial's phases are over, so a cancel can no longer change its outcome.

    Read from its live result, as the trial records it: a final status (set at the end of the
    finishing steps), an error (a phase failed: the trial finishes as a failure), or the
    verify phase's time (recorded the moment verification ended, before the finishing steps
    begin). Until then (queued for its turn, materializing, in the agent or verifying) a
    cancel reaches the phase it is in and the trial ends `cancelled`.

    Exact for a local trial: nothing it does between those records and its shielded finishing
    steps waits on anything, so a cancel cannot fall in between. A trial placed on a cluster
    node records none of them until its folder is back and read: a cancel while the node
    finishes it is still answered `cancelled_running`, though the node keeps its outcome (the
    node sends no event when its verification ends).
    """
    return result.status in FINAL or result.error is not None or result.timings.verify > 0
