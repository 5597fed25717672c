"""Per-schedule message options: jitter and max_age reach the message the
leader sends, as dramatiq expects them."""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AgeLimit

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.schedules.planner import jitter_ms, message_for
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, schedules_for_actor
from dramatiq_cron_middleware.testing import running_worker

TICK = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def bind(schedule: Schedule, actor: str = "report") -> BoundSchedule:
    return schedules_for_actor(actor, "default", schedule, timezone="UTC", catch_up="each", catch_up_window=0)[0]


def test_jitter_delays_within_bounds_deterministically_and_keeps_the_tick() -> None:
    """With jitter, every tick still yields one message whose id and
    ``cron_tick`` are those of the tick; the delay lies in [0, jitter], is
    the same on every attempt at that tick, and differs across ticks."""
    jittered = bind(Schedule("* * * * *", jitter=30_000))
    plain = bind(Schedule("* * * * *"))
    delays = []
    for n in range(200):
        tick = TICK + n * 60_000
        message = message_for(jittered, tick, prefix="p")
        again = message_for(jittered, tick, prefix="p")
        assert message.message_id == again.message_id
        assert message.options["cron_tick"] == message_for(plain, tick, prefix="p").options["cron_tick"]
        delay = jitter_ms(jittered, message.message_id)
        assert 0 <= delay <= 30_000
        assert delay == jitter_ms(jittered, again.message_id)
        delays.append(delay)
    assert len(set(delays)) > 150
    assert jitter_ms(plain, message_for(plain, TICK, prefix="p").message_id) == 0


def test_max_age_reaches_the_message_and_age_limit_drops_a_stale_one() -> None:
    """Given a schedule with max_age, its message carries the option, and
    dramatiq's AgeLimit skips it once it waited longer; without max_age the
    same message runs."""
    broker = StubBroker()
    broker.emit_after("process_boot")
    assert any(isinstance(m, AgeLimit) for m in broker.middleware)
    ran: list[Any] = []

    def report(*args: Any, **kwargs: Any) -> None:
        ran.append((args, kwargs))

    dramatiq.actor(report, actor_name="report", broker=broker, max_retries=0)
    stale = message_for(bind(Schedule("* * * * *", max_age=50, args=(1,))), TICK, prefix="p")
    fresh = message_for(bind(Schedule("* * * * *", args=(2,))), TICK, prefix="p")
    assert stale.options["max_age"] == 50
    assert "max_age" not in fresh.options
    # Ten seconds in the queue already: far past its 50 ms max_age.
    broker.enqueue(stale.copy(message_timestamp=stale.message_timestamp - 10_000))
    broker.enqueue(fresh)
    with running_worker(broker, worker_timeout=100) as worker:
        broker.join("default", timeout=10_000, fail_fast=False)
        worker.join()
    assert ran == [((2,), {})]


def test_overlap_marker_is_set_only_for_skip_schedules() -> None:
    skip = message_for(bind(Schedule("* * * * *", overlap="skip")), TICK, prefix="p")
    allow = message_for(bind(Schedule("* * * * *")), TICK, prefix="p")
    assert skip.options.get("cron_overlap") == "skip"
    assert "cron_overlap" not in allow.options
    assert "overlap_ttl" not in skip.options
