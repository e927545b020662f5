"""The engine's expiring maps (finished rollouts' status, tombstones): `cachetools.TTLCache`
behind a lock, on the engine's injectable clock (tests step it), pruned as it is used.

Two differences from a plain `TTLCache`, both kept from the maps it replaced: a read does not
count as a use (past `max_items` the value set longest ago goes, however often it is read), and
the lock makes every call safe from any thread (`abort` buries scopes from the trainer's).

`TtlCache` is the class (`set`, `get`, `keys`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from cachetools import TTLCache

V = TypeVar("V")


class _OldestFirst(TTLCache[str, Any]):
    """A `TTLCache` whose reads leave its order alone: it evicts by when a key was set."""

    def __getitem__(self, key: str) -> Any:
        if key not in self:  # no reordering; False once expired
            return self.__missing__(key)
        return super(TTLCache, self).__getitem__(key)  # past TTLCache's, which reorders


class TtlCache(Generic[V]):
    """Keeps each value for `ttl_sec` after it was last set, and at most `max_items` of them
    (the one set longest ago goes first); reads and writes prune expired ones."""

    def __init__(
        self,
        ttl_sec: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_items: float = math.inf,
    ) -> None:
        if ttl_sec <= 0:
            raise ValueError("ttl_sec must be positive")
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        self.ttl_sec = ttl_sec
        self.max_items = max_items
        self._items = _OldestFirst(maxsize=max_items, ttl=ttl_sec, timer=clock)
        self._lock = threading.Lock()

    def set(self, key: str, value: V) -> None:
        with self._lock:
            self._items.pop(key, None)  # set again: its time starts over, and it is newest
            self._items[key] = value

    def get(self, key: str) -> V | None:
        with self._lock:
            value: V | None = self._items.get(key)
            return value

    def keys(self) -> list[str]:
        """The live keys, the one set longest ago first."""
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
