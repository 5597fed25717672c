"""The read side of run monitoring (monitoring/read.py) against a real
redis-server: what ``dramatiq-cron check`` and ``runs`` report."""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.middleware import find_middleware
from dramatiq_cron_middleware.monitoring.read import check_report
from dramatiq_cron_middleware.schedules.planner import message_for
from dramatiq_cron_middleware.testing import running_worker
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def run_queue(broker: StubBroker, queue_name: str) -> None:
    """Run a real dramatiq Worker until ``queue_name`` is drained (failed
    messages included), then stop it."""
    with running_worker(broker, worker_timeout=50) as worker:
        broker.join(queue_name, fail_fast=False)
        worker.join()


def _app(redis_server: RedisServer, **options: object) -> tuple[CronMiddleware, StubBroker]:
    broker = StubBroker()
    cron = CronMiddleware(redis=redis_server.url, prefix="mon", **options)  # type: ignore[arg-type]
    broker.add_middleware(cron)

    @dramatiq.actor(broker=broker, cron="0 3 * * *")
    def nightly() -> None:
        pass

    return cron, broker


def test_a_registered_schedule_that_never_ran_is_pending_and_the_check_passes(redis_server: RedisServer) -> None:
    """Given a worker that registered its schedule (a baseline in the
    ledger) and whose next tick is still ahead, the check passes."""
    cron, broker = _app(redis_server)
    cron.start(broker)
    client = redis_server.client()
    try:
        wait_for(lambda: client.hexists(cron.keys.ticks, "nightly"), timeout=30, what="the registration")
        report = check_report(cron, broker)
    finally:
        cron.stop()

    assert report.exit_code == 0
    assert report.to_json() == {
        "schedules": [
            {"id": "nightly", "actor": "nightly", "name": None, "health": "pending", "since": None, "last_run": None}
        ],
        "stored": [],
    }
    assert cron.service.runs("nightly") == []


def test_an_empty_redis_with_no_worker_fails_the_check_once_a_tick_is_grace_overdue(
    redis_server: RedisServer,
) -> None:
    """Issue 28 item 5: a fresh or emptied Redis with no worker running has
    no ledger at all; the daily schedule's last tick is long past its grace,
    so the dead-man's switch fails (it used to answer ``pending``, exit 0)."""
    cron, broker = _app(redis_server)

    report = check_report(cron, broker)

    [nightly] = report.schedules
    assert (nightly.health, report.exit_code) == ("missed", 2)
    assert nightly.since_ms is not None and nightly.since_ms <= report.now_ms


def test_every_process_with_lead_false_fails_the_check(redis_server: RedisServer) -> None:
    """Issue 28 item 5: processes that may not lead register nothing and
    fire nothing; the check says ``missed`` (exit 2), not ``pending``."""
    cron, broker = _app(redis_server, lead=False)
    cron.start(broker)
    client = redis_server.client()
    try:
        wait_for(lambda: client.exists(cron.keys.ineligible), timeout=30, what="the ineligible process's presence")
        report = check_report(cron, broker)
    finally:
        cron.stop()
    assert [s.health for s in report.schedules] == ["missed"] and report.exit_code == 2


def test_a_schedule_whose_first_tick_is_ahead_stays_pending_without_a_ledger(redis_server: RedisServer) -> None:
    broker = StubBroker()
    cron = CronMiddleware(redis=redis_server.url, prefix="mon")
    broker.add_middleware(cron)
    later = int(time.time() * 1000) + 86_400_000

    @dramatiq.actor(broker=broker, cron=Schedule("0 3 * * *", start=later))
    def nightly() -> None:
        pass

    report = check_report(cron, broker)
    assert [s.health for s in report.schedules] == ["pending"] and report.exit_code == 0


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
    try:
        run_queue(broker, schedule.queue_name)
    finally:
        cron.stop()

    runs = cron.service.runs("nightly", limit=10)
    assert [r.tick_ms for r in runs] == ticks[:0:-1]  # newest first, three kept
    assert [r.outcome for r in runs] == ["failed", "succeeded", "succeeded"]
    failed = runs[0]
    assert failed.error == "ValueError: bad input at redis://***@db.example/0"
    assert failed.attempt == 1 and failed.pid == os.getpid() and failed.host
    assert failed.started_ms is not None and failed.finished_ms is not None
    assert failed.duration_ms == failed.finished_ms - failed.started_ms >= 0
    assert runs[0].to_json()["tick"].startswith("2023-11-17T22:13:20")


def test_a_leader_awaiting_a_run_event_blocks_on_redis_and_still_stops_at_once(redis_server: RedisServer) -> None:
    """Given a leader with an open run (a fired tick not started, its
    deadline an hour ahead) whose health thread blocks on Redis for the next
    run event, When the middleware stops, Then the lease is released and the
    stop ends that read by closing its connection instead of waiting it out.
    (A 60 s lease: the read blocks for a renewal interval, 20 s; a stop that
    waited for it would take that long.)"""
    cron, broker = _app(redis_server, lock_ttl=60_000)
    client = redis_server.client()
    [schedule] = cron.all_schedules()
    seconds, _ = client.time()
    client.zadd(cron.keys.runs_open, {f"p|1700000000000|{schedule.id}": int(seconds) * 1000 + 3_600_000})
    cron.start(broker)

    def readers() -> set[str]:
        return {str(c["id"]) for c in client.client_list() if c.get("cmd") == "xread" and "b" in c.get("flags", "")}

    wait_for(readers, timeout=30, what="the blocking read")
    blocked = readers()
    started = time.monotonic()
    cron.stop()
    stopped_in = time.monotonic() - started
    assert not client.exists(cron.keys.lease)
    assert not blocked & {str(c["id"]) for c in client.client_list()}, "the blocking read's connection is still open"
    assert stopped_in < 15, f"the stop took {stopped_in:.1f} s: it waited for the 20 s read"


def test_an_idle_leader_with_no_open_run_never_blocks_on_redis(redis_server: RedisServer) -> None:
    """Issue 32 (idle cost): Given a leader with nothing due and no run open,
    When it renews its lease three times, Then its health thread has made no
    blocking read of the run events: it waits in its own process until the
    leader tells it of a tick (it used to block on Redis every renewal
    interval)."""
    cron, broker = _app(redis_server, lock_ttl=3000)
    client = redis_server.client()
    client.config_resetstat()
    cron.start(broker)
    try:
        wait_for(lambda: client.exists(cron.keys.lease), timeout=30, what="the lease")
        renewals: list[str] = []

        def renewed_three_times() -> bool:
            renewed = str(client.hget(cron.keys.lease, "renewed") or "")
            if not renewals or renewals[-1] != renewed:
                renewals.append(renewed)
            return len(renewals) >= 4

        wait_for(renewed_three_times, timeout=60, interval=0.05, what="three renewals")
        stats = client.info("commandstats")
        assert "cmdstat_xread" not in stats, stats.get("cmdstat_xread")
    finally:
        cron.stop()


def test_a_run_that_failed_for_good_clears_its_overlap_mark(redis_server: RedisServer) -> None:
    """Given a skip-overlap schedule's running mark, When its message fails
    and dramatiq will not retry it, Then the mark is cleared at once (dramatiq
    calls after_process_message hooks in reverse order, so Retries marks the
    message failed only after the middleware's hook: the mark used to stay
    until its TTL, skipping the next ticks)."""
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(redis=redis_server.url, prefix="mon"))
    cron = find_middleware(broker)

    @dramatiq.actor(broker=broker, cron=Schedule("0 3 * * *", overlap="skip"), max_retries=0)
    def nightly() -> None:
        raise ValueError("no")

    [schedule] = cron.all_schedules()
    message = message_for(schedule, 1_700_000_000_000, prefix=cron.prefix)
    client = redis_server.client()
    client.set(cron.keys.running(schedule.id), message.message_id, px=600_000)
    broker.enqueue(message)
    try:
        run_queue(broker, schedule.queue_name)
    finally:
        cron.stop()
    assert not client.exists(cron.keys.running(schedule.id))
