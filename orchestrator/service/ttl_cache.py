"""A small TTL map for finished rollouts: it prunes itself as it is used, no timer needed."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class TtlCache(Generic[V]):
    """Keeps each value for `ttl_sec` after it was set; reads and writes prune expired ones."""

    def __init__(self, ttl_sec: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_sec <= 0:
            raise ValueError("ttl_sec must be positive")
        self.ttl_sec = ttl_sec
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def _prune(self) -> None:
        now = self._clock()
        while self._items:
            key, (expires, _) = next(iter(self._items.items()))
            if expires > now:
                break
            del self._items[key]

    def set(self, key: str, value: V) -> None:
        self._prune()
        self._items.pop(key, None)
        self._items[key] = (self._clock() + self.ttl_sec, value)

    def get(self, key: str) -> V | None:
        self._prune()
        item = self._items.get(key)
        return None if item is None else item[1]

    def __len__(self) -> int:
        self._prune()
        return len(self._items)
