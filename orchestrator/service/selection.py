"""Which rollouts a cancel names: exactly one selector, narrowed to a tenant's prefix.

Kept apart from the engine because the rules are the server's authorization promise: a
tenant's cancel (`within` its prefix) must never reach another tenant's rollouts, nor
tombstone their ids. Here they are plain data in, plain lists out.

`select` applies a `Selection`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    """`live`: live ids to cancel. `missing`: ids named that are not live (they read
    `not_found`). `to_bury`: those of `missing` within the caller's prefix, the ones a cancel
    may tombstone (if they have not finished)."""

    live: list[str]
    missing: list[str]
    to_bury: list[str]


def select(
    sessions: Mapping[str, str | None],
    *,
    ids: Iterable[str] | None,
    prefix: str | None,
    everything: bool,
    session_id: str | None,
    within: str | None,
) -> Selection:
    """Select among the live rollouts (`sessions`: live id -> its session_id) by exactly one
    of `ids`, `prefix`, `everything` or `session_id`; `within`, when given, drops live ids
    outside it and keeps missing ids outside it from being tombstoned."""
    if sum([ids is not None, prefix is not None, everything, session_id is not None]) != 1:
        raise ValueError("give exactly one selector: ids, prefix, all or session_id")
    missing: list[str] = []
    if ids is not None:
        wanted = list(dict.fromkeys(ids))
        live = [i for i in wanted if i in sessions]
        missing = [i for i in wanted if i not in sessions]
    elif everything:
        live = list(sessions)
    elif session_id is not None:
        live = [i for i, session in sessions.items() if session == session_id]
    else:
        assert prefix is not None
        live = [i for i in sessions if i.startswith(prefix)]
    if within is None:
        return Selection(live, missing, missing)
    return Selection(
        [i for i in live if i.startswith(within)],
        missing,
        [i for i in missing if i.startswith(within)],
    )
