"""The read side of run monitoring (monitoring/read.py) against a real
redis-server: what ``dramatiq-cron check`` and ``runs`` report."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.middleware import find_middleware
from dramatiq_cron_middleware.monitoring.read import check_report, read_runs
from dramatiq_cron_middleware.schedules.planner import message_for
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


def test_a_worker_records_each_run_with_its_outcome_newest_first(redis_server: RedisServer) -> None:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(redis=redis_server.url, prefix="mon", run_history=3))
    cron = find_middleware(broker)

    @dramatiq.actor(broker=broker, cron="0 3 * * *", max_retries=0)
    def nightly(fail: bool = False) -> None:
        if fail:
            raise ValueError("bad input at redis://user:secret@db.example/0")

    schedule = cron.all_schedules()[0]
    ticks = [1_700_000_000_000 + i * 86_400_000 for i in range(4)]
    for i, tick in enumerate(ticks):
        message = message_for(schedule, tick, prefix=cron.prefix)
        broker.enqueue(message.copy(kwargs={"fail": i == 3}))
    worker = dramatiq.Worker(broker, worker_timeout=50)
    worker.start()
    try:
        broker.join(schedule.queue_name, fail_fast=False)
        worker.join()
    finally:
        worker.stop()
        cron.stop()

    client, _ = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)
    runs = read_runs(client, cron.keys, "nightly", limit=10)
    assert [r.tick_ms for r in runs] == ticks[:0:-1]  # newest first, three kept
    assert [r.outcome for r in runs] == ["failed", "succeeded", "succeeded"]
    failed = runs[0]
    assert failed.error == "ValueError: bad input at redis://***@db.example/0"
    assert failed.attempt == 1 and failed.pid == os.getpid() and failed.host
    assert failed.started_ms is not None and failed.finished_ms is not None
    assert failed.duration_ms == failed.finished_ms - failed.started_ms >= 0
    assert runs[0].to_json()["tick"].startswith("2023-11-17T22:13:20")
