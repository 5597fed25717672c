"""Reading ahead (a thread produces the next Redis replies while the caller
works on the current one): every item in order, an error in its place, and
no thread left behind however the caller stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.schedules.schedule import schedules_for_actor
from dramatiq_cron_middleware.store.read_ahead import read_ahead


def readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dramatiq-cron-read-ahead"]


def test_every_item_arrives_in_order() -> None:
    assert list(read_ahead(iter(range(1000)), depth=2)) == list(range(1000))
    assert list(read_ahead(iter([]))) == []
    assert readers() == []


def test_an_error_producing_an_item_is_raised_in_its_place() -> None:
    def items() -> Iterator[int]:
        yield from range(5)
        raise ConnectionError("lost Redis at page 6")

    seen: list[int] = []
    with pytest.raises(ConnectionError, match="page 6"):
        for item in read_ahead(items()):
            seen.append(item)
    assert seen == [0, 1, 2, 3, 4]
    assert readers() == []


def test_a_caller_that_stops_early_ends_the_producer_without_reading_everything() -> None:
    produced: list[int] = []

    def items() -> Iterator[int]:
        for n in range(10_000):
            produced.append(n)
            yield n

    ahead = read_ahead(items(), depth=2)
    assert [next(ahead) for _ in range(3)] == [0, 1, 2]
    ahead.close()  # the caller's loop ended (break, an exception)
    assert readers() == []
    assert len(produced) <= 3 + 2 + 2  # at most a queue's depth (and the item in hand) ahead


def test_next_ticks_known_without_a_walk_match_a_walk() -> None:
    """The tick queue asks first for next ticks that need no walk, then
    walks the rest oldest first; both answers are next_after's."""
    daily = schedules_for_actor(
        "job", "default", "29 2 * * *", timezone="Europe/Berlin", catch_up="each", catch_up_window=0
    )[0]
    every = schedules_for_actor(
        "job", "default", Schedule(every=90_000, offset=7), timezone="UTC", catch_up="each", catch_up_window=0
    )[0]
    instant = 1_774_745_000_000  # 2026-03-29 00:43 UTC, the spring-forward night in Berlin
    assert every.cadence.next_after_if_known(instant) == every.next_after(instant)  # arithmetic: always known
    unseen = instant - 40 * 86_400_000  # before any walk this test made
    assert daily.cadence.next_after_if_known(unseen) is None
    tick = daily.next_after(instant)
    assert daily.cadence.next_after_if_known(instant) == tick  # the walk's window now answers it
    assert daily.cadence.next_after_if_known(tick - 1) == tick
    assert daily.cadence.next_after_if_known(tick) is None  # past the window: a walk of its own
    assert daily.cadence.next_after_if_known(instant - 1) is None
