"""The retention cache behind finished rollouts' status: it forgets on time, by itself."""

from __future__ import annotations

import pytest

from orchestrator.service.ttl_cache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_values_expire_after_their_ttl_and_are_pruned_on_use() -> None:
    clock = Clock()
    cache: TtlCache[str] = TtlCache(10.0, clock=clock)
    cache.set("a", "first")
    clock.now += 6
    cache.set("b", "second")
    assert (cache.get("a"), cache.get("b"), len(cache)) == ("first", "second", 2)

    clock.now += 5  # a is 11 s old, b 5 s
    assert cache.get("a") is None
    assert cache.get("b") == "second"
    assert len(cache) == 1  # pruned, not merely hidden

    clock.now += 5
    assert len(cache) == 0


def test_setting_again_restarts_the_ttl() -> None:
    clock = Clock()
    cache: TtlCache[int] = TtlCache(10.0, clock=clock)
    cache.set("a", 1)
    clock.now += 8
    cache.set("a", 2)
    clock.now += 8
    assert cache.get("a") == 2


def test_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ttl_sec"):
        TtlCache(0)


def test_past_max_items_the_one_set_longest_ago_goes_however_often_it_is_read() -> None:
    clock = Clock()
    cache: TtlCache[int] = TtlCache(10.0, clock=clock, max_items=2)
    cache.set("a", 1)
    cache.set("b", 2)
    assert cache.get("a") == 1  # a read is not a use: "a" stays the oldest
    cache.set("c", 3)
    assert (cache.get("a"), cache.keys()) == (None, ["b", "c"])
    cache.set("b", 4)  # set again: now the newest
    cache.set("d", 5)
    assert cache.keys() == ["b", "d"]


def test_a_value_expires_at_exactly_its_ttl() -> None:
    clock = Clock()
    cache: TtlCache[int] = TtlCache(10.0, clock=clock)
    cache.set("a", 1)
    clock.now += 9.999
    assert cache.get("a") == 1
    clock.now += 0.001
    assert (cache.get("a"), len(cache), cache.keys()) == (None, 0, [])


def test_max_items_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="max_items"):
        TtlCache(1.0, max_items=0)
