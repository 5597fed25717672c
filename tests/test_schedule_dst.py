"""Daylight saving time, as classic cron defines it, across real transitions.

- A fixed-time schedule fires once in a fall-back repeated hour (the first
  occurrence), and a tick inside a spring-forward gap fires once, at the
  first instant after the gap.
- A schedule that repeats within the hour (second, minute or hour field
  starting with ``*``) fires by elapsed time: through both occurrences of a
  repeated hour, and not at wall-clock times a gap skips.

Each row: zone, expression, a local start, and the expected ticks after it
written as local ISO times *with their UTC offset*, so a row names the exact
instants, not just wall-clock labels.
"""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, schedules_for_actor

# fmt: off
CASES = [
    # Europe/Berlin: spring 2025-03-30 02:00 CET -> 03:00 CEST, fall 2025-10-26 03:00 CEST -> 02:00 CET.
    ("berlin fall-back, fixed time fires once", "Europe/Berlin", "30 2 * * *", "2025-10-25T12:00+02:00",
     ["2025-10-26T02:30+02:00", "2025-10-27T02:30+01:00"]),
    ("berlin fall-back, every 30 min fires through both passes", "Europe/Berlin", "*/30 * * * *",
     "2025-10-26T01:45+02:00",
     ["2025-10-26T02:00+02:00", "2025-10-26T02:30+02:00", "2025-10-26T02:00+01:00", "2025-10-26T02:30+01:00",
      "2025-10-26T03:00+01:00"]),
    ("berlin fall-back, hourly at :15 fires in both passes", "Europe/Berlin", "15 * * * *", "2025-10-26T01:30+02:00",
     ["2025-10-26T02:15+02:00", "2025-10-26T02:15+01:00", "2025-10-26T03:15+01:00"]),
    ("berlin spring-forward, fixed time in the gap fires at the gap's end", "Europe/Berlin", "30 2 * * *",
     "2025-03-29T12:00+01:00", ["2025-03-30T03:00+02:00", "2025-03-31T02:30+02:00"]),
    ("berlin spring-forward, two gap ticks collapse into one", "Europe/Berlin", "0,30 2 * * *",
     "2025-03-29T12:00+01:00", ["2025-03-30T03:00+02:00", "2025-03-31T02:00+02:00"]),
    ("berlin spring-forward, a gap tick and a 03:00 tick fire once", "Europe/Berlin", "0 2,3 * * *",
     "2025-03-30T00:00+01:00", ["2025-03-30T03:00+02:00", "2025-03-31T02:00+02:00"]),
    ("berlin spring-forward, every 30 min skips the missing hour", "Europe/Berlin", "*/30 * * * *",
     "2025-03-30T01:15+01:00", ["2025-03-30T01:30+01:00", "2025-03-30T03:00+02:00", "2025-03-30T03:30+02:00"]),
    ("berlin spring-forward, every second steps over the gap", "Europe/Berlin", "* * * * * *",
     "2025-03-30T01:59:58+01:00", ["2025-03-30T01:59:59+01:00", "2025-03-30T03:00:00+02:00"]),
    ("berlin fall-back, seconds-first fixed time fires once", "Europe/Berlin", "0 30 2 * * *",
     "2025-10-26T00:00+02:00", ["2025-10-26T02:30+02:00", "2025-10-27T02:30+01:00"]),
    # America/New_York: spring 2025-03-09 02:00 EST -> 03:00 EDT, fall 2025-11-02 02:00 EDT -> 01:00 EST.
    ("new york fall-back, fixed time fires once", "America/New_York", "30 1 * * *", "2025-11-01T12:00-04:00",
     ["2025-11-02T01:30-04:00", "2025-11-03T01:30-05:00"]),
    ("new york fall-back, fixed hour with a minute list fires once each", "America/New_York", "0,30 1 * * *",
     "2025-11-02T00:00-04:00", ["2025-11-02T01:00-04:00", "2025-11-02T01:30-04:00", "2025-11-03T01:00-05:00"]),
    ("new york fall-back, every 15 min in hour 1 fires in both passes", "America/New_York", "*/15 1 * * *",
     "2025-11-02T01:40-04:00",
     ["2025-11-02T01:45-04:00", "2025-11-02T01:00-05:00", "2025-11-02T01:15-05:00", "2025-11-02T01:30-05:00",
      "2025-11-02T01:45-05:00", "2025-11-03T01:00-05:00"]),
    ("new york spring-forward, fixed time in the gap fires at 03:00", "America/New_York", "15 2 * * *",
     "2025-03-08T12:00-05:00", ["2025-03-09T03:00-04:00", "2025-03-10T02:15-04:00"]),
    ("new york spring-forward, hourly skips the missing 02:00", "America/New_York", "0 * * * *",
     "2025-03-09T00:30-05:00", ["2025-03-09T01:00-05:00", "2025-03-09T03:00-04:00", "2025-03-09T04:00-04:00"]),
    # Australia/Lord_Howe, a 30-minute shift: spring 2025-10-05 02:00 -> 02:30 (+10:30 -> +11:00),
    # fall 2025-04-06 02:00 -> 01:30 (+11:00 -> +10:30).
    ("lord howe spring-forward, fixed time in the half-hour gap fires at 02:30", "Australia/Lord_Howe",
     "15 2 * * *", "2025-10-04T12:00+10:30", ["2025-10-05T02:30+11:00", "2025-10-06T02:15+11:00"]),
    ("lord howe spring-forward, fixed time at the gap's start fires at 02:30", "Australia/Lord_Howe",
     "0 2 * * *", "2025-10-04T12:00+10:30", ["2025-10-05T02:30+11:00", "2025-10-06T02:00+11:00"]),
    ("lord howe fall-back, fixed time in the repeated half hour fires once", "Australia/Lord_Howe",
     "45 1 * * *", "2025-04-05T12:00+11:00", ["2025-04-06T01:45+11:00", "2025-04-07T01:45+10:30"]),
    ("lord howe fall-back, every 10 min fires through both half hours", "Australia/Lord_Howe", "*/10 * * * *",
     "2025-04-06T01:35+11:00",
     ["2025-04-06T01:40+11:00", "2025-04-06T01:50+11:00", "2025-04-06T01:30+10:30", "2025-04-06T01:40+10:30",
      "2025-04-06T01:50+10:30", "2025-04-06T02:00+10:30"]),
    # Southern hemisphere, one-hour shift: Australia/Sydney spring 2025-10-05 02:00 AEST -> 03:00 AEDT,
    # fall 2025-04-06 03:00 AEDT -> 02:00 AEST.
    ("sydney spring-forward, fixed time in the gap fires at 03:00", "Australia/Sydney", "30 2 * * *",
     "2025-10-04T12:00+10:00", ["2025-10-05T03:00+11:00", "2025-10-06T02:30+11:00"]),
    ("sydney fall-back, fixed time fires once", "Australia/Sydney", "30 2 * * *", "2025-04-05T12:00+11:00",
     ["2025-04-06T02:30+11:00", "2025-04-07T02:30+10:00"]),
    ("sydney fall-back, hourly fires in both passes", "Australia/Sydney", "30 * * * *", "2025-04-06T02:00+11:00",
     ["2025-04-06T02:30+11:00", "2025-04-06T02:30+10:00", "2025-04-06T03:30+10:00"]),
]
# fmt: on


def bind(expression: str, zone: str) -> BoundSchedule:
    """A schedule of a test actor, evaluated in ``zone``."""
    return schedules_for_actor("dst", "default", expression, timezone=zone, catch_up="each", catch_up_window=0)[0]


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def local(instant_ms: int, zone: str) -> str:
    return dt.datetime.fromtimestamp(instant_ms / 1000, tz=ZoneInfo(zone)).isoformat(timespec="seconds")


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ticks_across_real_transitions_follow_classic_cron(
    zone: str, expression: str, start: str, expected: list[str]
) -> None:
    """Given a schedule in a zone with a DST transition ahead,
    when the ticks after ``start`` are enumerated with next_after,
    then they are exactly the expected instants, in order."""
    schedule = bind(expression, zone)
    ticks, t = [], ms(start)
    for _ in expected:
        t = schedule.next_after(t)
        ticks.append(local(t, zone))
    assert ticks == [local(ms(e), zone) for e in expected]


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_last_before_walks_the_same_ticks_backwards(
    zone: str, expression: str, start: str, expected: list[str]
) -> None:
    """last_before is the exact inverse of next_after, across transitions:
    the tick before each expected tick (and before any instant up to it)
    is the previous expected tick."""
    schedule = bind(expression, zone)
    instants = [ms(e) for e in expected]
    for earlier, later in itertools.pairwise(instants):
        assert local(schedule.last_before(later), zone) == local(earlier, zone)
        assert schedule.last_before(earlier + 1) == earlier
        assert schedule.last_before((earlier + later) // 2 + 1) == earlier


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ticks_between_lists_each_instant_once(zone: str, expression: str, start: str, expected: list[str]) -> None:
    """A new leader catching up across a transition sees each tick once."""
    schedule = bind(expression, zone)
    ticks = list(schedule.cadence.ticks_between(ms(start), ms(expected[-1])))
    assert ticks == [ms(e) for e in expected]


def test_instants_inside_the_repeated_hour_find_the_right_pass() -> None:
    """An instant in the *second* pass of a repeated hour must not make an
    elapsed-time schedule re-fire ticks of the first pass, and an instant in
    the first pass must not skip to the second."""
    schedule = bind("*/15 * * * *", "America/New_York")
    second_pass = ms("2025-11-02T01:20-05:00")
    assert local(schedule.next_after(second_pass), "America/New_York") == "2025-11-02T01:30:00-05:00"
    assert local(schedule.last_before(second_pass), "America/New_York") == "2025-11-02T01:15:00-05:00"
    first_pass = ms("2025-11-02T01:20-04:00")
    assert local(schedule.next_after(first_pass), "America/New_York") == "2025-11-02T01:30:00-04:00"
    assert local(schedule.last_before(first_pass), "America/New_York") == "2025-11-02T01:15:00-04:00"
    fixed = bind("30 1 * * *", "America/New_York")
    assert local(fixed.next_after(second_pass), "America/New_York") == "2025-11-03T01:30:00-05:00"
    assert local(fixed.last_before(second_pass), "America/New_York") == "2025-11-02T01:30:00-04:00"


@pytest.mark.parametrize(
    ("zone", "expression"),
    [
        ("Europe/Berlin", "30 2 * * *"),
        ("Europe/Berlin", "*/20 * * * *"),
        ("America/New_York", "15 1 * * *"),
        ("Australia/Lord_Howe", "0,30 * * * *"),
        ("UTC", "0 9 * * mon"),
    ],
)
def test_the_shared_next_tick_memo_answers_as_a_fresh_walk_from_any_instant(zone: str, expression: str) -> None:
    """Schedules of one expression and zone share the last walk's window;
    instants asked in any order, inside and outside it, across DST
    transitions, get what a walk of their own gives."""
    import random

    rng = random.Random(f"{zone}{expression}")
    schedule = schedules_for_actor("job", "default", expression, timezone=zone, catch_up="each", catch_up_window=0)[0]
    spring = int(dt.datetime(2025, 3, 29, tzinfo=ZoneInfo(zone)).timestamp() * 1000)
    fall = int(dt.datetime(2025, 10, 25, tzinfo=ZoneInfo(zone)).timestamp() * 1000)
    instants = [base + rng.randrange(0, 3 * 86_400_000) for base in (spring, fall) for _ in range(150)]
    ticks = list(schedule.cadence.ticks_between(spring, spring + 86_400_000))[:5]
    instants += [tick + delta for tick in ticks for delta in (-1, 0, 1)]
    rng.shuffle(instants)
    for instant in instants:
        assert schedule.next_after(instant) == schedule.cadence._next_after(instant), instant
