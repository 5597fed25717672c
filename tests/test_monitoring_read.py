"""The read side of run monitoring (monitoring/read.py) against a real
redis-server: what ``dramatiq-cron check`` and ``runs`` report."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.monitoring.read import check_report, read_runs
from dramatiq_cron_middleware.store.connection import scheduler_clients
from tests.support.redis_server import RedisServer


def _app(redis_server: RedisServer, **options: object) -> tuple[CronMiddleware, StubBroker]:
    broker = StubBroker()
    cron = CronMiddleware(redis=redis_server.url, prefix="mon", **options)  # type: ignore[arg-type]
    broker.add_middleware(cron)

    @dramatiq.actor(broker=broker, cron="0 3 * * *")
    def nightly() -> None:
        pass

    return cron, broker


def test_a_schedule_that_never_ran_is_pending_and_the_check_passes(redis_server: RedisServer) -> None:
    cron, broker = _app(redis_server)

    report = check_report(cron, broker)

    assert report.exit_code == 0
    assert report.to_json() == {
        "schedules": [
            {
                "id": "nightly",
                "actor": "nightly",
                "name": "0 3 * * *",
                "health": "pending",
                "since": None,
                "last_run": None,
            }
        ]
    }
    client, _ = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)
    assert read_runs(client, cron.keys, "nightly") == []
