"""The service's reads that the CLI's ``list`` and its hints render
(``last_decisions``, ``pauses``, ``count_by_actor``), on the memory store
under the simulator: the CLI reads them through the service, never the store."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.testing import CronSimulator

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def _ms(at: dt.datetime) -> int:
    return int(at.timestamp() * 1000)


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(catch_up_window=3_600_000))
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


def test_the_service_reads_the_last_decisions_the_pauses_and_the_runtime_counts(broker: StubBroker) -> None:
    # Given a declared schedule paused for three minutes and two runtime
    # schedules of another actor, When two simulated minutes pass, Then the
    # service reads each schedule's last decision (the paused ticks), the
    # pause with its end, and how many runtime schedules each actor has.
    @dramatiq.actor(cron="* * * * *")
    def minutely() -> None: ...

    @dramatiq.actor
    def report() -> None: ...

    cron = CronMiddleware.of(broker)
    simulator = CronSimulator(broker, now=T0)
    try:
        cron.add("report", "*/5 * * * *", name="five", who="test")
        cron.add("report", "0 * * * *", name="hourly", who="test")
        cron.pause("minutely", until=T0 + dt.timedelta(minutes=3), who="test")
        simulator.advance(by=dt.timedelta(minutes=2))
        service = cron.service
        assert service.count_by_actor() == {"report": 2}
        assert service.pauses() == {"minutely": _ms(T0 + dt.timedelta(minutes=3))}
        decided = service.last_decisions()["minutely"]
        assert (decided.tick_ms, decided.outcome) == (_ms(T0 + dt.timedelta(minutes=2)), "paused")
    finally:
        simulator.close()
