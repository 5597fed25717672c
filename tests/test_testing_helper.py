"""The testing helper (``dramatiq_cron_middleware.testing``): users test
their own cron actors on a ``StubBroker`` with a fake clock and no Redis,
and get the very messages a real leader sends."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.testing import CronSimulator, running_worker, ticks_between
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

UTC = dt.timezone.utc
T0 = dt.datetime(2030, 1, 1, 0, 0, tzinfo=UTC)


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    """A StubBroker with the middleware and no Redis anywhere."""
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(catch_up_window=3_600_000))
    broker.add_middleware(CurrentMessage())
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


def test_ticks_between_lists_the_exact_messages_of_every_tick_in_order(broker: StubBroker) -> None:
    @dramatiq.actor(cron=[Schedule("*/5 * * * *", args=(1,), kwargs={"full": True}, options={"max_retries": 0})])
    def report(n: int, full: bool) -> None: ...

    @dramatiq.actor(cron="0 * * * *")
    def hourly() -> None: ...

    messages = ticks_between(broker, T0, T0 + dt.timedelta(hours=1))

    assert [(m.actor_name, m.options["cron_tick"]) for m in messages][-2:] == [
        ("report", "2030-01-01T01:00:00+00:00"),
        ("hourly", "2030-01-01T01:00:00+00:00"),
    ]
    assert len(messages) == 13  # twelve five-minute ticks and one hourly, the start excluded
    first = messages[0]
    assert first.options["cron_tick"] == "2030-01-01T00:05:00+00:00"
    assert (first.args, first.kwargs, first.options["max_retries"]) == ((1,), {"full": True}, 0)
    # Deterministic ids: the same tick gives the same id, another tick another.
    again = ticks_between(broker, T0, T0 + dt.timedelta(minutes=5))
    assert [m.message_id for m in again] == [first.message_id]
    assert len({m.message_id for m in messages}) == len(messages)


def test_advance_enqueues_due_ticks_and_a_worker_runs_them_without_redis(broker: StubBroker) -> None:
    """Given no Redis configured at all, the worker boots (no leader thread)
    and runs what the fake clock made due, each with its ``cron_tick``."""
    ran: list[str] = []

    @dramatiq.actor(cron="*/5 * * * *")
    def cleanup() -> None:
        message = CurrentMessage.get_current_message()
        assert message is not None
        ran.append(message.options["cron_tick"])

    simulator = CronSimulator(broker, now=T0)
    with running_worker(broker, worker_timeout=50) as worker:
        sent = simulator.advance(by=dt.timedelta(minutes=12))
        broker.join(cleanup.queue_name)
        worker.join()
    assert [m.options["cron_tick"] for m in sent] == ["2030-01-01T00:05:00+00:00", "2030-01-01T00:10:00+00:00"]
    assert sorted(ran) == [m.options["cron_tick"] for m in sent]
    assert simulator.now == T0 + dt.timedelta(minutes=12)
    # The next advance continues from the last decided tick, never repeats one.
    assert [m.options["cron_tick"] for m in simulator.advance(to=T0 + dt.timedelta(minutes=15))] == [
        "2030-01-01T00:15:00+00:00"
    ]


@pytest.mark.parametrize(
    ("catch_up", "fired"),
    [
        ("each", ["00:01", "00:02", "00:03", "00:04"]),
        ("latest", ["00:04"]),
        ("none", []),
    ],
)
def test_a_leaderless_gap_is_caught_up_by_the_schedules_policy(
    broker: StubBroker, catch_up: str, fired: list[str]
) -> None:
    @dramatiq.actor(cron=[Schedule("* * * * *", catch_up=catch_up)])  # type: ignore[arg-type]
    def every_minute() -> None: ...

    simulator = CronSimulator(broker, now=T0)
    assert simulator.advance(by=dt.timedelta(seconds=270), leading=False) == []
    sent = simulator.advance(by=dt.timedelta(seconds=1))
    assert [m.options["cron_tick"][11:16] for m in sent] == fired
    assert all(m.options["cron_tick"] != "2030-01-01T00:05:00+00:00" for m in sent)
    assert (simulator.missed != []) == (len(fired) < 4)


def test_ticks_older_than_the_catch_up_window_are_recorded_missed_not_fired(broker: StubBroker) -> None:
    @dramatiq.actor(cron=[Schedule("* * * * *", catch_up_window=120_000)])
    def every_minute() -> None: ...

    simulator = CronSimulator(broker, now=T0)
    simulator.advance(to=T0 + dt.timedelta(minutes=10, seconds=30), leading=False)
    sent = simulator.advance(by=0)
    assert [m.options["cron_tick"][11:16] for m in sent] == ["00:09", "00:10"]
    assert simulator.missed == [("every_minute", int((T0 + dt.timedelta(minutes=8)).timestamp() * 1000))]


def test_a_naive_datetime_is_refused(broker: StubBroker) -> None:
    @dramatiq.actor(cron="* * * * *")
    def every_minute() -> None: ...

    with pytest.raises(ValueError, match="timezone-aware"):
        CronSimulator(broker, now=dt.datetime(2030, 1, 1))


def test_ticks_between_predicts_the_message_ids_a_real_leader_enqueues(redis_server: RedisServer) -> None:
    """The helper is only useful if it tells the truth: a real leader on a
    real Redis enqueues messages whose ids and ticks ``ticks_between``
    predicts exactly."""
    broker = StubBroker()
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=1000)
    broker.add_middleware(middleware)

    @dramatiq.actor(broker=broker, cron=[Schedule("* * * * * *", kwargs={"k": 1})])
    def every_second(k: int) -> None: ...

    try:
        middleware.start(broker)
        queue = broker.queues[every_second.queue_name]
        wait_for(lambda: queue.qsize() >= 2, timeout=60, what="two real enqueues")
    finally:
        middleware.stop()
    real: list[Any] = []
    while not queue.empty():
        real.append(dramatiq.Message.decode(queue.get_nowait()))
    for message in real:
        tick = dt.datetime.fromisoformat(message.options["cron_tick"])
        predicted = ticks_between(broker, tick - dt.timedelta(milliseconds=1), tick)
        assert [(p.message_id, p.kwargs, p.options) for p in predicted] == [
            (message.message_id, message.kwargs, message.options)
        ]
    broker.close()


def test_under_the_simulator_a_pause_with_an_end_holds_the_ticks_before_it_only(broker: StubBroker) -> None:
    """``pause(until=)`` acts on the simulated store as on Redis: the
    simulated leader records the ticks before the end as paused and fires
    from the end on, with no resume."""

    @dramatiq.actor(cron="* * * * *")
    def minutely() -> None: ...

    cron = CronMiddleware.of(broker)
    simulator = CronSimulator(broker, now=T0)
    try:
        done = cron.pause("minutely", until=T0 + dt.timedelta(minutes=3), who="test")
        assert done.changed and done.until_ms == int((T0 + dt.timedelta(minutes=3)).timestamp() * 1000)
        fired = simulator.advance(by=dt.timedelta(minutes=5))
        assert [m.options["cron_tick"][11:16] for m in fired] == ["00:03", "00:04", "00:05"]
        assert cron.service.paused() == set()  # the pause ended by itself
        outcomes = [(e.outcome, e.who) for e in reversed(cron.service.history(limit=20, match={"minutely"}))]
        assert outcomes[:3] == [("pause", "test"), ("paused", ""), ("paused", "")]
    finally:
        simulator.close()


def test_under_the_simulator_a_trigger_enqueues_a_manual_message_and_the_schedule_fires_as_before(
    broker: StubBroker,
) -> None:
    @dramatiq.actor(cron="*/10 * * * *")
    def report() -> None: ...

    cron = CronMiddleware.of(broker)
    simulator = CronSimulator(broker, now=T0)
    try:
        simulator.advance(by=dt.timedelta(minutes=3))
        done = cron.trigger("report", who="test")
        [message] = [m for m in broker.queues["default"].queue if done.message_id.encode() in m]
        assert b'"cron_manual":true' in message
        assert done.tick.startswith("2030-01-01T00:03")  # the simulated time
        assert [m.options["cron_tick"][11:16] for m in simulator.advance(by=dt.timedelta(minutes=7))] == ["00:10"]
    finally:
        simulator.close()


def test_under_the_simulator_a_backfill_enqueues_the_paused_ticks_once(broker: StubBroker) -> None:
    """A backfill runs on the simulated store: the ticks a pause held back
    are enqueued once (marked ``cron_backfill``), a second run enqueues
    nothing, and the ticks that fired are left out."""

    @dramatiq.actor(cron="* * * * *")
    def minutely() -> None: ...

    cron = CronMiddleware.of(broker)
    simulator = CronSimulator(broker, now=T0)
    try:
        cron.pause("minutely")
        simulator.advance(by=dt.timedelta(minutes=3))
        cron.resume("minutely")
        simulator.advance(by=dt.timedelta(minutes=2))  # 00:04 and 00:05 fire
        start, end = T0 + dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=6)
        plan = cron.backfill("minutely", start=start, end=end, dry_run=True)
        assert [t // 60_000 % 60 for t in plan.ticks] == [1, 2, 3] and len(plan.fired) == 2
        report = cron.backfill("minutely", start=start, end=end)
        assert [t // 60_000 % 60 for t in report.enqueued] == [1, 2, 3]  # type: ignore[union-attr]
        backfilled = [m for m in broker.queues["default"].queue if b'"cron_backfill":true' in m]
        assert len(backfilled) == 3
        again = cron.backfill("minutely", start=start, end=end)
        assert again.enqueued == []  # type: ignore[union-attr]
    finally:
        simulator.close()
