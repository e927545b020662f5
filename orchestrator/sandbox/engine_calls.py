"""How many requests a trial makes to its engine, by kind.

A backend counts each request it sends (`count`) where it talks to the engine; the count goes
to the trial whose task tree sent it, through a context variable the trial sets (`counting`),
so concurrent trials never mix their counts and work outside any trial counts nowhere. A
blocking engine call run in a thread keeps the count only when the thread runs in the
caller's context (`in_context`): the pools that run engine calls do that.

The kinds are the backend's words; Docker's are the request's method and path with the
ids left out (`POST /containers/{id}/start`), so the count says exactly what went over the
socket: each exec is three requests (create, start, inspect), an upload one.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_current: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar(
    "trialbox_engine_calls", default=None
)


@contextlib.contextmanager
def counting(counter: Counter[str] | None = None) -> Iterator[Counter[str]]:
    """Count the engine requests made in this context (and the tasks it starts) from now,
    into `counter` (a new one by default: a session counts each of its calls into one)."""
    counter = Counter() if counter is None else counter
    token = _current.set(counter)
    try:
        yield counter
    finally:
        _current.reset(token)


def count(kind: str) -> None:
    """One request of `kind`, for whichever trial is counting here (none: not counted)."""
    counter = _current.get()
    if counter is not None:
        counter[kind] += 1


def in_context(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Callable[[], T]:
    """`fn(*args, **kwargs)` to run in a thread in the caller's context, so what it sends
    is counted for the caller's trial."""
    return functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
