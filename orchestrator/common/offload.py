"""Blocking work off the event loop, in a pool of its own.

Reading a task folder, hashing a build context or building a tar blocks; done on the loop it
would freeze every trial at once. This pool is for such short host work only: engine calls
have their own pools in the Docker backend, so a burst of file work never waits behind an
agent's long exec, nor the other way round.

`run_blocking(fn, ...)` is the one way in.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

POOL_SIZE = 16
_pool = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="trialbox-io")


async def run_blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in the host-work pool, in the caller's context (so what it asks
    of an engine counts for the caller's trial: `sandbox/engine_calls.py`); the caller's loop
    stays free."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_pool, call)
