"""Issue 23's pure logic, in-process on fake clocks: one-shots (their one
tick, their retirement by the simulated leader), descriptions, and the
durations and instants people write for pauses."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from functools import partial

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.errors import CronScheduleError
from dramatiq_cron_middleware.schedules.instants import duration_ms, instant_ms, pause_expiry
from dramatiq_cron_middleware.schedules.schedule import NEVER, bind_schedule, of_actor
from dramatiq_cron_middleware.store.runtime_definition import bind_definition, definition_of
from dramatiq_cron_middleware.testing import CronSimulator

AT = 1_893_456_000_123  # 2030-01-01T00:00:00.123Z


def bind(item: Schedule, *, source: str = "code") -> object:
    return bind_schedule(
        "job",
        "default",
        item,
        timezone="UTC",
        catch_up="each",
        catch_up_window=60_000,
        source=source,  # type: ignore[arg-type]
    )


def test_a_one_shot_has_exactly_one_tick_at_its_instant() -> None:
    schedule = bind_schedule("job", "default", Schedule(at=AT), timezone="UTC", catch_up="each", catch_up_window=1)
    assert schedule.at == AT and schedule.expression == "once at 2030-01-01T00:00:00.123Z"
    assert schedule.next_after(0) == AT and schedule.next_after(AT - 1) == AT and schedule.next_after(AT) == NEVER
    assert list(schedule.cadence.ticks_between(AT - 10_000, AT + 10_000)) == [AT]
    assert schedule.last_before(AT + 5) == AT


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (partial(Schedule, at="2030-01-01"), "at must be epoch milliseconds (int) or a datetime, got '2030-01-01'"),  # type: ignore[arg-type]
        (partial(Schedule, at=dt.datetime(2030, 1, 1)), "at must be a timezone-aware datetime"),
        (partial(Schedule, "* * * * *", at=AT), "at= is a one-shot and takes no expression='* * * * *'"),
        (partial(Schedule, at=AT, end=AT + 1000), f"at= is a one-shot and takes no end={AT + 1000}"),
        (
            partial(Schedule, "* * * * *", description="x" * 501),
            "description must be a string of at most 500 characters",
        ),
        (
            partial(Schedule, "* * * * *", description=42),
            "description must be a string of at most 500 characters, got 42",
        ),  # type: ignore[arg-type]
    ],
)
def test_bad_one_shots_and_descriptions_are_refused_when_built_naming_the_value(
    item: Callable[[], Schedule], message: str
) -> None:
    with pytest.raises(CronScheduleError) as caught:
        item()
    assert message in str(caught.value) and str(caught.value).startswith("Schedule"), str(caught.value)
    with pytest.raises(CronScheduleError) as caught, of_actor("job"):
        item()
    assert message in str(caught.value) and "'job'" in str(caught.value), str(caught.value)


def test_a_stored_definition_keeps_the_instant_and_the_description_through_both_binding_paths() -> None:
    for item in (
        Schedule(at=AT, name="once", description="<b>hi</b>"),
        Schedule("0 9 * * *", name="d", description="x"),
    ):
        bound = bind(item, source="runtime")
        data = json.loads(json.dumps(definition_of(bound)))  # type: ignore[arg-type]
        again = bind_definition(data)
        assert (again.at, again.description, again.shape) == (bound.at, bound.description, bound.shape)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "ms"), [("2h", 7_200_000), ("1h30m", 5_400_000), ("45s", 45_000), ("1d", 86_400_000), ("500ms", 500)]
)
def test_durations_people_write_are_read(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


def test_instants_people_write_are_read_or_refused_naming_them() -> None:
    assert instant_ms("2030-01-01T00:00:00.123Z") == AT and instant_ms(str(AT)) == AT
    for text, message in [
        ("last tuesday", "cannot read 'last tuesday' as an instant"),
        ("2030-01-01T00:00", "needs a time zone offset"),
    ]:
        with pytest.raises(ValueError, match=message):
            instant_ms(text)


def test_a_pause_end_is_one_of_until_or_duration_and_in_the_future() -> None:
    now = 1_800_000_000_000
    assert pause_expiry(now) is None
    assert pause_expiry(now, duration="2h") == now + 7_200_000
    assert pause_expiry(now, until="2027-01-15T10:00:00+01:00") == now + 3_600_000
    assert pause_expiry(now, until=now + 1) == now + 1
    for kwargs, message in [
        ({"until": now + 1, "duration": "2h"}, "not both"),
        ({"duration": "two hours"}, "cannot read 'two hours' as a duration"),
        ({"duration": 0}, "positive int of ms"),
        ({"until": now}, "must be in the future"),
        ({"until": "2027-01-15T08:00"}, "needs a time zone offset"),
    ]:
        with pytest.raises(ValueError, match=message):
            pause_expiry(now, **kwargs)  # type: ignore[arg-type]


def test_a_simulated_one_shot_fires_once_then_the_leader_retires_it_after_the_retention() -> None:
    """Given a one-shot a minute ahead and a retention of an hour, When the
    simulated clock passes its instant, Then it is enqueued once, And it is
    listed until an hour after its instant, then removed by the leader."""
    broker = StubBroker()
    cron = CronMiddleware(one_shot_retention=3_600_000)
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="welcome", broker=broker)
    start = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    simulator = CronSimulator(broker, now=start)
    cron.add("welcome", at=start + dt.timedelta(minutes=1), name="once", description="hello")
    sent = simulator.advance(by=dt.timedelta(minutes=30))
    assert [m.options["cron_schedule"] for m in sent] == ["welcome:once"]
    assert cron.runtime.get("welcome", "once") is not None
    assert simulator.advance(by=dt.timedelta(minutes=32)) == []
    assert cron.runtime.get("welcome", "once") is None
