"""Interval schedules (``every=``/``offset=``) and bounds (``start``/``end``).

In-process tables: no Redis, no worker.  An interval ticks at
``k * every + offset`` from the Unix epoch, so every process computes the
same ticks; ``start``/``end`` bound any schedule to ``[start, end)``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, CronScheduleError, Schedule
from dramatiq_cron_middleware.schedules.planner import message_for
from dramatiq_cron_middleware.schedules.schedule import NEVER, BoundSchedule
from dramatiq_cron_middleware.testing import CronSimulator, cron_middleware_of

UTC = dt.timezone.utc
MINUTE = 60_000
HOUR = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a whole hour


def bind(cron: Any, *, name: str = "tenant_report") -> BoundSchedule:
    """Declare an actor with ``cron`` on a fresh broker; return its one schedule."""
    broker = StubBroker()
    middleware = CronMiddleware(redis="redis://127.0.0.1:1")
    broker.add_middleware(middleware)

    def job() -> None:
        pass

    dramatiq.actor(job, actor_name=name, broker=broker, cron=cron)
    (schedule,) = middleware.all_schedules()
    return schedule


def ms(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=UTC).timestamp() * 1000)


# (schedule, instant, next_after, last_before)
INTERVALS = [
    ("every minute, on a tick", Schedule(every=MINUTE), T0, T0 + MINUTE, T0 - MINUTE),
    ("every minute, between ticks", Schedule(every=MINUTE), T0 + 1, T0 + MINUTE, T0),
    ("every minute, just before a tick", Schedule(every=MINUTE), T0 - 1, T0, T0 - MINUTE),
    ("quarter past each hour", Schedule(every=HOUR, offset=15 * MINUTE), T0, T0 + 15 * MINUTE, T0 - 45 * MINUTE),
    ("90 s from the epoch", Schedule(every=90_000), 0, 90_000, -90_000),
    ("90 s, instant not aligned", Schedule(every=90_000, offset=1), 180_001, 270_001, 90_001),
    ("before the epoch", Schedule(every=1000, offset=500), -1, 500, -500),
    ("one second", Schedule(every=1000), T0 + 999, T0 + 1000, T0),
]


@pytest.mark.parametrize(
    ("schedule", "instant", "after", "before"), [i[1:] for i in INTERVALS], ids=[i[0] for i in INTERVALS]
)
def test_an_interval_ticks_at_multiples_of_every_plus_offset_from_the_epoch(
    schedule: Schedule, instant: int, after: int, before: int
) -> None:
    bound = bind(schedule)
    assert bound.next_after(instant) == after
    assert bound.last_before(instant) == before
    assert (after - schedule.offset) % schedule.every == 0  # type: ignore[operator]


def test_every_process_agrees_on_an_intervals_ticks_whatever_its_zone() -> None:
    berlin = bind(Schedule(every=7 * MINUTE, offset=MINUTE, timezone="Europe/Berlin"))
    utc = bind(Schedule(every=7 * MINUTE, offset=MINUTE))
    # Across Berlin's 2026 spring-forward gap: elapsed time, no DST rule.
    start = ms(2026, 3, 29, 0, 0)
    assert list(berlin.cadence.ticks_between(start, start + 4 * HOUR)) == list(
        utc.cadence.ticks_between(start, start + 4 * HOUR)
    )
    ticks = list(utc.cadence.ticks_between(start, start + 4 * HOUR))
    assert all(b - a == 7 * MINUTE for a, b in itertools.pairwise(ticks))


def test_an_interval_has_a_readable_label_and_identity() -> None:
    bound = bind(Schedule(every=HOUR, offset=15 * MINUTE))
    assert bound.expression == "every 3600000 ms, offset 900000 ms"
    assert bound.id == "tenant_report"
    assert bound.every == HOUR and bound.offset == 15 * MINUTE
    assert bound.source == "code" and bound.revision == 0
    named = bind(Schedule(every=HOUR, name="hourly"))
    assert named.id == "tenant_report/hourly"


# (schedule, instant, next_after, last_before or None for "raises")
BOUNDED = [
    (
        "cron before start fires first at start",
        Schedule("0 * * * *", start=T0 + 2 * HOUR),
        T0,
        T0 + 2 * HOUR,
        None,
    ),
    (
        "cron start between ticks",
        Schedule("0 * * * *", start=T0 + 1),
        T0 - 5,
        T0 + HOUR,
        None,
    ),
    (
        "cron inside the bounds",
        Schedule("0 * * * *", start=T0, end=T0 + 5 * HOUR),
        T0 + HOUR,
        T0 + 2 * HOUR,
        T0,
    ),
    (
        "end is exclusive",
        Schedule("0 * * * *", end=T0 + 2 * HOUR),
        T0 + HOUR,
        NEVER,
        T0,
    ),
    (
        "after end: never, and the last tick before end",
        Schedule("0 * * * *", end=T0 + 2 * HOUR + 1),
        T0 + 10 * HOUR,
        NEVER,
        T0 + 2 * HOUR,
    ),
    (
        "interval with start and end",
        Schedule(every=MINUTE, start=T0 + 30_000, end=T0 + 3 * MINUTE),
        T0,
        T0 + MINUTE,
        None,
    ),
    (
        "interval after end",
        Schedule(every=MINUTE, start=T0, end=T0 + 3 * MINUTE),
        T0 + HOUR,
        NEVER,
        T0 + 2 * MINUTE,
    ),
    (
        "aware datetimes as bounds",
        Schedule(
            "30 9 * * *",
            timezone="Europe/Berlin",
            start=dt.datetime(2026, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            end=dt.datetime(2026, 1, 7, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        ),
        ms(2026, 1, 1),
        ms(2026, 1, 5, 8, 30),
        None,
    ),
]


@pytest.mark.parametrize(
    ("schedule", "instant", "after", "before"), [b[1:] for b in BOUNDED], ids=[b[0] for b in BOUNDED]
)
def test_start_and_end_bound_any_schedule_to_a_half_open_span(
    schedule: Schedule, instant: int, after: int, before: int | None
) -> None:
    bound = bind(schedule)
    assert bound.next_after(instant) == after
    if before is None:
        with pytest.raises(CronScheduleError, match="no tick before"):
            bound.last_before(instant)
    else:
        assert bound.last_before(instant) == before


def test_ticks_between_stops_at_end_and_never_is_past_every_window() -> None:
    bound = bind(Schedule("0 * * * *", start=T0 + HOUR, end=T0 + 4 * HOUR))
    assert list(bound.cadence.ticks_between(T0 - HOUR, T0 + 100 * HOUR)) == [T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR]
    assert bound.next_after(NEVER) == NEVER
    # NEVER still converts to a datetime in any zone (the CLI and messages format ticks).
    assert dt.datetime.fromtimestamp(NEVER / 1000, tz=dt.timezone(dt.timedelta(hours=14))).year == 9999


def test_changing_only_the_bounds_keeps_a_schedules_identity() -> None:
    assert bind(Schedule("0 * * * *", end=T0)).id == bind(Schedule("0 * * * *")).id


BAD = [
    ("every too short", partial(Schedule, every=999), "999"),
    ("every zero", partial(Schedule, every=0), "every"),
    ("every a float", partial(Schedule, every=1500.0), "1500.0"),  # type: ignore[arg-type]
    ("every a bool", partial(Schedule, every=True), "True"),
    ("every a string", partial(Schedule, every="60000"), "'60000'"),  # type: ignore[arg-type]
    ("negative offset", partial(Schedule, every=MINUTE, offset=-1), "-1"),
    ("offset equal to every", partial(Schedule, every=MINUTE, offset=MINUTE), "60000"),
    ("offset a float", partial(Schedule, every=MINUTE, offset=0.5), "0.5"),  # type: ignore[arg-type]
    ("offset without every", partial(Schedule, "* * * * *", offset=5), "offset"),
    ("expression and every", partial(Schedule, "* * * * *", every=MINUTE), "not both"),
    ("neither expression nor every", partial(Schedule), "every="),
    ("start after end", partial(Schedule, "* * * * *", start=T0 + 1, end=T0), "start must be before end"),
    ("start equal to end", partial(Schedule, every=MINUTE, start=T0, end=T0), "start must be before end"),
    ("naive datetime", partial(Schedule, "* * * * *", start=dt.datetime(2026, 1, 1)), "timezone-aware"),
    ("float bound", partial(Schedule, "* * * * *", end=1.5e12), "1500000000000.0"),  # type: ignore[arg-type]
    ("string bound", partial(Schedule, "* * * * *", end="2026-01-01"), "'2026-01-01'"),  # type: ignore[arg-type]
    ("negative bound", partial(Schedule, "* * * * *", start=-1), "-1"),
    ("bound past 9999", partial(Schedule, "* * * * *", end=NEVER), str(NEVER)),
]


@pytest.mark.parametrize(("cron", "value"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_interval_or_bound_fails_when_the_schedule_is_built_naming_the_value(
    cron: Callable[[], Schedule], value: str
) -> None:
    with pytest.raises(CronScheduleError) as info:
        bind(cron())
    message = str(info.value)
    assert message.startswith("Schedule"), message
    assert value in message, message


def test_the_leaders_decisions_honour_an_interval_and_its_bounds_with_catch_up() -> None:
    """Given an interval bounded to three of its ticks, When the simulated
    leader (the leader's own ``due_claims``) runs across the bounds, on time
    and after a leaderless gap, Then exactly those three ticks fire, once
    each, with ``cron_tick`` in the schedule's zone, and nothing after end."""
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(redis="redis://127.0.0.1:1"))
    start, end = T0 + MINUTE, T0 + 4 * MINUTE
    dramatiq.actor(lambda: None, actor_name="bounded", broker=broker, cron=Schedule(every=MINUTE, start=start, end=end))
    simulator = CronSimulator(broker, now=T0 - HOUR)
    on_time = simulator.advance(by=dt.timedelta(minutes=62))  # up to T0 + 2 min, leading
    gap = simulator.advance(by=dt.timedelta(minutes=2), leading=False)  # the last tick falls in a gap
    later = simulator.advance(by=dt.timedelta(days=1))
    simulator.close()
    ticks = [m.options["cron_tick"] for m in [*on_time, *gap, *later]]
    expected = [dt.datetime.fromtimestamp(t / 1000, tz=UTC).isoformat() for t in range(start, end, MINUTE)]
    assert ticks == expected
    assert (len(on_time), len(gap), len(later)) == (2, 0, 1)  # the gap's tick is caught up after it
    # The message of a tick that never comes can still be built (NEVER is a valid datetime).
    (schedule,) = cron_middleware_of(broker).all_schedules()
    assert message_for(schedule, schedule.next_after(end), prefix="p").options["cron_tick"].startswith("9999-01-01")
