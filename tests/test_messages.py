"""What every scheduled message carries: the tick it is for, and an id
derived from (prefix, schedule, tick) so consumers can deduplicate."""

from __future__ import annotations

import datetime as dt

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.schedules.planner import message_for


def declared(cron: object) -> CronMiddleware:
    broker = StubBroker()
    middleware = CronMiddleware(redis="redis://127.0.0.1:1")
    broker.add_middleware(middleware)

    @dramatiq.actor(broker=broker, cron=cron, queue_name="reports")
    def report(kind: str = "short") -> None:
        pass

    return middleware


TICK = int(dt.datetime(2026, 11, 29, 20, 41, tzinfo=dt.timezone.utc).timestamp() * 1000)


def test_a_message_names_its_tick_with_the_utc_offset() -> None:
    (schedule,) = declared("41 20 * * *").all_schedules()
    message = message_for(schedule, TICK, prefix="dramatiq-cron")
    assert message.options["cron_tick"] == "2026-11-29T20:41:00+00:00"
    assert message.options["cron_schedule"] == "report"
    assert message.queue_name == "reports" and message.actor_name == "report"


def test_a_zoned_schedule_names_its_tick_in_its_zone() -> None:
    (schedule,) = declared(Schedule("41 21 * * *", timezone="Europe/Berlin")).all_schedules()
    message = message_for(schedule, TICK, prefix="dramatiq-cron")
    assert message.options["cron_tick"] == "2026-11-29T21:41:00+01:00"


def test_message_ids_are_deterministic_per_schedule_and_tick() -> None:
    a, b = declared(["41 20 * * *", Schedule("41 20 * * *", name="other", kwargs={"kind": "long"})]).all_schedules()
    assert message_for(a, TICK, prefix="p").message_id == message_for(a, TICK, prefix="p").message_id
    assert message_for(a, TICK, prefix="p").message_id != message_for(a, TICK + 60_000, prefix="p").message_id
    assert message_for(a, TICK, prefix="p").message_id != message_for(b, TICK, prefix="p").message_id
    assert message_for(a, TICK, prefix="p").message_id != message_for(a, TICK, prefix="q").message_id
    assert message_for(b, TICK, prefix="p").kwargs == {"kind": "long"}


def test_a_manual_message_is_marked_and_gets_a_fresh_id() -> None:
    (schedule,) = declared("41 20 * * *").all_schedules()
    first = message_for(schedule, TICK, prefix="p", manual=True)
    second = message_for(schedule, TICK, prefix="p", manual=True)
    assert first.options["cron_manual"] is True
    assert first.message_id != second.message_id
