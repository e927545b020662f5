"""The status documents a rollout reads as, built in one place.

A rollout reads `queued`, `running` or `grading` while live, its outcome once settled, and
`cancelled` while tombstoned. Status, long polls and tombstones all build the same document
here, so what `GET /rollouts/{id}` answers cannot drift between them.

`live_status`, `settled_status` and `cancelled_status` build the three.
"""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.service.rollouts import RetriedAttempt, RolloutStatus
from orchestrator.trials.result import TrialResult

FINAL = frozenset({"success", "failure", "cancelled"})
"""The outcomes: once a rollout has settled on one, only its expiry changes what it reads."""


def _retried(earlier: list[TrialResult]) -> dict[str, object]:
    """The try number and the earlier (infra) tries, as the status document says them."""
    return {
        "attempt": 1 + len(earlier),
        "retried": [
            RetriedAttempt(
                trial_id=r.trial_id, trial_dir=r.trial_dir or None,
                error_type=r.error.type if r.error else None,
                error=r.error.message if r.error else None,
            )
            for r in earlier
        ],
    }  # fmt: skip


def live_status(
    rollout_id: str, live: TrialResult | None, earlier: list[TrialResult] | None = None
) -> RolloutStatus:
    """A rollout in flight: queued until it holds a slot, then its trial's own status (read
    from `live`, the trial's result as it goes).

    A trial whose outcome is known but whose result is still being written reads `grading`,
    not the outcome: a client that saw `success` could otherwise find no result yet."""
    state = "queued" if live is None else live.status
    if state in FINAL:
        state = "grading"
    return RolloutStatus(rollout_id=rollout_id, status=state, **_retried(earlier or []))


def settled_status(
    rollout_id: str, result: TrialResult, earlier: list[TrialResult] | None = None
) -> RolloutStatus:
    """A finished rollout: its outcome as the trial's result says it (its last try's)."""
    error = result.error
    return RolloutStatus(
        rollout_id=rollout_id, status=result.status, reward=result.reward,
        rewards=result.rewards, error=error.message if error else None,
        error_category=error.category if error else None,
        trial_dir=result.trial_dir or None, finished_at=result.finished_at,
        usage=result.usage, model_limit=result.model_limit, **_retried(earlier or []),
    )  # fmt: skip


def cancelled_status(rollout_id: str, why: str) -> RolloutStatus:
    """A rollout that will not run (a tombstone): cancelled now, saying why."""
    return RolloutStatus(
        rollout_id=rollout_id, status="cancelled", error=why, finished_at=datetime.now(UTC)
    )
