"""``Cadence.count_between`` counts a range's ticks without listing
them (a backfill says how many before it starts): it agrees with listing
them, across offset changes, for cron and interval schedules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from tests.support.examples import examples

_EXPRESSIONS = [
    "*/20 * * * * *",
    "5,6 * * * * *",
    "* 1 * * * *",
    "*/5 * * * *",
    "30 1 * * *",
    "0 2 * * *",
    "30 2 * * 0",
    "0 0 L * *",
    "H H * * *",
    "0,30 */3 * * 1-5",
    "15 2 29 2 *",
    "*/15 1-3 * * *",
]
_ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata"]


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(
    expression=st.sampled_from(_EXPRESSIONS),
    zone=st.sampled_from(_ZONES),
    start=st.integers(1_600_000_000_000, 1_900_000_000_000),
    days=st.floats(0, 1),
)
def test_counting_a_cron_range_agrees_with_listing_it(expression: str, zone: str, start: int, days: float) -> None:
    schedule = bind_schedule(
        "job", "q", Schedule(expression, timezone=zone, name="n"), timezone="UTC", catch_up="each", catch_up_window=0
    )
    seconds = len(expression.split()) == 6
    end = start + int(days * (1 if seconds else 40) * 86_400_000) + 1
    listed, tick = 0, schedule.next_after(start - 1)
    while tick < end:
        listed += 1
        tick = schedule.next_after(tick)
    assert schedule.cadence.count_between(start, end) == listed


@given(every=st.integers(1000, 10**7), data=st.data())
def test_counting_an_interval_range_agrees_with_listing_it(every: int, data: st.DataObject) -> None:
    offset = data.draw(st.integers(0, every - 1))
    start = data.draw(st.integers(0, 10**13))
    end = start + data.draw(st.integers(0, 200 * every))
    schedule = bind_schedule(
        "job", "q", Schedule(every=every, offset=offset), timezone="UTC", catch_up="each", catch_up_window=0
    )
    assert schedule.cadence.count_between(start, end) == len(list(schedule.cadence.ticks_between(start - 1, end - 1)))
