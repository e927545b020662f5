"""One run of a piece of async work per key, shared by whoever asks while it runs: how an
image is built once however many trials ask for it at the same time.

`SingleFlight` keeps its work per event loop (its owner may outlive a loop, as a process-wide
image builder does across `asyncio.run` calls), so no asyncio object is shared between loops.
A caller awaits the future through `asyncio.shield`, so its cancel leaves the work running for
the others.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class SingleFlight:
    """One future per key and event loop: callers that come while it runs share it."""

    def __init__(self) -> None:
        self._inflight: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Future[Any]]
        ] = weakref.WeakKeyDictionary()

    def running(self, key: str) -> bool:
        """Whether work for `key` is in flight on this loop (a caller now would join it)."""
        return key in self._inflight.get(asyncio.get_running_loop(), {})

    def __call__(self, key: str, make: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """The future of `key`'s work on this loop, started with `make()` if none runs."""
        inflight = self._inflight.setdefault(asyncio.get_running_loop(), {})
        future: asyncio.Future[T] | None = inflight.get(key)
        if future is None:
            future = inflight[key] = asyncio.ensure_future(make())
            future.add_done_callback(lambda _: inflight.pop(key, None))
        return future
