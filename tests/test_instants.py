"""One reading of instants and durations (schedules/instants.py), with one
rounding rule: cut to the millisecond at or before, by exact arithmetic.
Every surface that takes an instant or a duration reads it through it:
``Schedule(start=, end=, at=)``, the simulator's clock, pauses, backfills,
the CLI and the dashboard's forms."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from hypothesis import given
from hypothesis import strategies as st

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.schedules.instants import NEVER, UTC, duration_ms, instant_ms, pause_expiry
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.testing import CronSimulator

# 15475143849.994 s is 15475143849993.999... ms as a float: a reading
# through a float timestamp loses the last millisecond.
AWKWARD = dt.datetime(2460, 5, 21, 11, 4, 9, 994_000, tzinfo=UTC)
AWKWARD_MS = 15_475_143_849_994


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware())
    dramatiq.set_broker(broker)
    yield broker
    broker.close()


@given(st.integers(min_value=0, max_value=NEVER - 1), st.integers(min_value=0, max_value=999))
def test_an_instant_is_cut_to_the_millisecond_at_or_before_it(ms: int, micros: int) -> None:
    """Given any instant with sub-millisecond digits, in any form, Then it
    reads as the millisecond at or before it: never rounded up, never off
    by one through a float."""
    moment = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms, microseconds=micros)
    assert instant_ms(moment) == ms
    assert instant_ms(moment.astimezone(dt.timezone(dt.timedelta(hours=-7)))) == ms
    assert instant_ms(moment.isoformat()) == ms
    assert instant_ms(str(ms)) == ms == instant_ms(ms)


@given(st.integers(min_value=0, max_value=10**15), st.integers(min_value=0, max_value=999))
def test_a_duration_is_cut_to_the_millisecond_at_or_before_it(ms: int, micros: int) -> None:
    assert duration_ms(dt.timedelta(milliseconds=ms, microseconds=micros), positive=False) == ms


def test_every_surface_reads_an_instant_by_the_same_rule(broker: StubBroker) -> None:
    """Given the instant a float timestamp reads a millisecond short, Then a
    Schedule's bounds and one-shot, a pause's end and the simulator's clock
    all read it exactly (the simulator read instants and timedeltas through
    ``int(float * 1000)``, now and then a millisecond short, and
    ``Schedule`` rounded to the nearest millisecond, up as well as down)."""
    start = bind_schedule(
        "job", "default", Schedule("* * * * *", start=AWKWARD), timezone="UTC", catch_up="each", catch_up_window=0
    )
    assert start.start == AWKWARD_MS
    almost = AWKWARD + dt.timedelta(microseconds=999)
    at = bind_schedule("job", "default", Schedule(at=almost), timezone="UTC", catch_up="each", catch_up_window=0)
    assert at.at == AWKWARD_MS  # not rounded up to the next millisecond
    assert pause_expiry(0, until=AWKWARD) == AWKWARD_MS
    assert pause_expiry(0, duration=dt.timedelta(milliseconds=AWKWARD_MS)) == AWKWARD_MS

    @dramatiq.actor(cron="0 0 * * *")
    def nightly() -> None:
        pass

    # Instants and lengths that ``int(... * 1000)`` of a float reads 1 ms short.
    start_ms, step_ms = 139_751_028_864_291, 539_656_225_879
    simulator = CronSimulator(broker, now=dt.datetime(6398, 7, 14, 18, 14, 24, 291_000, tzinfo=UTC))
    assert simulator.now_ms == start_ms
    simulator.advance(by=dt.timedelta(milliseconds=step_ms, microseconds=999), leading=False)
    assert simulator.now_ms == start_ms + step_ms


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tomorrow", "cannot read 'tomorrow' as an instant"),
        ("2030-01-01T00:00", "needs a time zone offset"),
        (dt.datetime(2030, 1, 1), "must be a timezone-aware datetime"),
        (-1, "between 1970 and 9999"),
        (NEVER, "between 1970 and 9999"),
        (True, "must be an aware datetime, epoch ms or ISO 8601 text, got True"),
        (1.5, "got 1.5"),
    ],
)
def test_an_instant_that_is_none_of_those_is_refused_naming_it(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        instant_ms(value)


def test_a_schedule_takes_no_text_for_an_instant_and_names_the_option() -> None:
    with pytest.raises(ValueError, match="start must be epoch milliseconds \\(int\\) or a datetime, got '2030-01-01'"):
        Schedule("* * * * *", start="2030-01-01")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "ms"),
    [("2h", 7_200_000), ("1h30m", 5_400_000), ("500ms", 500), (90_000, 90_000), (dt.timedelta(minutes=5), 300_000)],
)
def test_durations_in_every_form_read_alike(value: object, ms: int) -> None:
    assert duration_ms(value) == ms


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("two hours", "cannot read 'two hours' as a duration"),
        (0, "must be a positive int of ms"),
        ("0s", "must be a positive int of ms"),
        (dt.timedelta(microseconds=999), "must be a positive int of ms"),
        (True, "got True"),
        (-5, "got -5"),
    ],
)
def test_a_duration_that_is_none_of_those_is_refused_naming_it(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        duration_ms(value)
