"""A worker's start log says what it schedules: one INFO record with a
brief table of the declared schedules and the count of runtime ones."""

from __future__ import annotations

import logging

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def test_the_start_log_lists_the_declared_schedules_and_counts_the_runtime_ones(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dramatiq_cron_middleware")
    broker = RedisBroker(url=redis_server.url)
    cron = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(cron)
    dramatiq.actor(
        lambda: None,
        actor_name="cleanup",
        broker=broker,
        cron=["0 * * * *", Schedule("30 1 * * *", name="nightly", timezone="Europe/Berlin")],
    )
    dramatiq.actor(lambda: None, actor_name="sync", broker=broker, cron=Schedule(every=90_000))
    cron.add_many([("sync", "0 9 * * *", f"t{n}") for n in range(3)])
    try:
        cron.start(broker)
        record = wait_for(
            lambda: [r for r in caplog.records if r.getMessage().startswith("Cron scheduler started")],
            timeout=60,
            what="the start log",
        )[0]
    finally:
        cron.stop()
        broker.close()
    first, *table = record.getMessage().splitlines()
    assert record.levelno == logging.INFO
    assert first.endswith("): 3 declared schedule(s), 3 runtime schedule(s):"), first
    assert [line.split() for line in table] == [
        ["ACTOR", "NAME", "SCHEDULE", "ZONE"],
        ["cleanup", "-", "0", "*", "*", "*", "*", "UTC"],
        ["cleanup", "nightly", "30", "1", "*", "*", "*", "Europe/Berlin"],
        ["sync", "-", "every", "90000", "ms", "UTC"],
    ]
