"""Sentry Crons check-ins (``dramatiq_cron_middleware.sentry``), captured
in-process: sentry_sdk runs with a transport that keeps every envelope, so
nothing leaves the machine.  The cron messages are the simulator's (the very
messages a leader sends) and a real dramatiq ``Worker`` runs them."""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import sentry_sdk
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AgeLimit
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from dramatiq_cron_middleware import CronMiddleware, Schedule, find_middleware
from dramatiq_cron_middleware.schedules.planner import message_for
from dramatiq_cron_middleware.schedules.schedule import schedules_for_actor
from dramatiq_cron_middleware.sentry import SentryCrons, monitor_config, monitor_slug
from dramatiq_cron_middleware.testing import CronSimulator, running_worker
from tests.support.redis_server import RedisServer

UTC = dt.timezone.utc
T0 = dt.datetime(2030, 1, 1, 0, 0, tzinfo=UTC)
SLUG = re.compile(r"^(?![0-9]+$)[a-z0-9_-]{1,50}$")  # what Sentry accepts as a monitor slug


class Envelopes(Transport):
    """Keeps the payload of every check-in sentry_sdk sends."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.lock = threading.Lock()
        self.check_ins: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        with self.lock:
            self.check_ins += [item.payload.json for item in envelope.items if item.type == "check_in"]

    def statuses(self, slug: str) -> list[str]:
        return [c["status"] for c in self.check_ins if c["monitor_slug"] == slug]


@pytest.fixture
def sent() -> Iterator[Envelopes]:
    transport = Envelopes()
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
    )
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(catch_up_window=3_600_000))
    broker.add_middleware(SentryCrons())
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


def run(broker: StubBroker, simulator: CronSimulator, *, by: dt.timedelta) -> None:
    """Fire what falls due in ``by`` and let a real worker run it all,
    retries included."""
    with running_worker(broker, worker_timeout=50) as worker:
        simulator.advance(by=by)
        broker.join("default", fail_fast=False, timeout=20_000)
        worker.join()


def test_a_run_checks_in_in_progress_then_ok_with_its_duration_and_the_schedules_monitor(
    broker: StubBroker, sent: Envelopes
) -> None:
    @dramatiq.actor(cron=Schedule("30 2 * * *", timezone="Europe/Berlin"), time_limit=1_800_000)
    def nightly() -> None: ...

    run(broker, CronSimulator(broker, now=T0), by=dt.timedelta(days=1))

    start, finish = sent.check_ins
    assert (start["monitor_slug"], start["status"], finish["status"]) == ("nightly", "in_progress", "ok")
    assert start["check_in_id"] == finish["check_in_id"]
    assert finish["duration"] is not None and finish["duration"] >= 0
    # The thresholds of run monitoring: grace 60 s, max_runtime the actor's
    # time limit plus 5 s (in whole minutes, rounded up), one failure.
    assert start["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "30 2 * * *"},
        "timezone": "Europe/Berlin",
        "checkin_margin": 1,
        "max_runtime": 31,
        "failure_issue_threshold": 1,
        "recovery_threshold": 1,
    }


def test_the_monitor_takes_the_schedules_own_grace_max_runtime_and_failure_threshold(
    broker: StubBroker, sent: Envelopes
) -> None:
    @dramatiq.actor(cron=Schedule("0 * * * *", grace=300_000, max_runtime=7_200_000, failure_threshold=3))
    def hourly() -> None: ...

    run(broker, CronSimulator(broker, now=T0), by=dt.timedelta(hours=1))

    config = sent.check_ins[0]["monitor_config"]
    assert (config["checkin_margin"], config["max_runtime"], config["failure_issue_threshold"]) == (5, 120, 3)


def test_every_failed_attempt_is_an_error_and_a_retry_is_a_check_in_of_its_own(
    broker: StubBroker, sent: Envelopes
) -> None:
    """Given an actor that fails once and then succeeds on its retry, Then
    Sentry sees in_progress, error (the attempt that dramatiq retries), then
    in_progress, ok under a new check-in id: the monitor recovers."""
    attempts: list[int] = []

    @dramatiq.actor(cron="0 * * * *", max_retries=3, min_backoff=10, max_backoff=50)
    def flaky() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")

    run(broker, CronSimulator(broker, now=T0), by=dt.timedelta(hours=1))

    assert sent.statuses("flaky") == ["in_progress", "error", "in_progress", "ok"]
    ids = [c["check_in_id"] for c in sent.check_ins]
    assert ids[0] == ids[1] != ids[2] == ids[3]


def test_a_run_that_fails_for_good_ends_in_error(broker: StubBroker, sent: Envelopes) -> None:
    @dramatiq.actor(cron="0 * * * *", max_retries=0)
    def broken() -> None:
        raise ValueError("always")

    run(broker, CronSimulator(broker, now=T0), by=dt.timedelta(hours=2))

    by_id: dict[str, list[str]] = {}
    for check_in in sent.check_ins:
        by_id.setdefault(check_in["check_in_id"], []).append(check_in["status"])
    assert list(by_id.values()) == [["in_progress", "error"]] * 2


def test_other_messages_and_skipped_cron_messages_send_nothing(sent: Envelopes) -> None:
    """Given a plain actor's message and a cron message that ``AgeLimit``
    drops for its ``max_age`` before it starts, Then no check-in is sent:
    Sentry sees the tick as missed, which it was."""
    broker = StubBroker()
    broker.add_middleware(CronMiddleware())
    broker.add_middleware(SentryCrons())
    try:
        ran: list[str] = []

        @dramatiq.actor(broker=broker)
        def plain() -> None:
            ran.append("plain")

        @dramatiq.actor(broker=broker, cron=Schedule("* * * * *", max_age=1000))
        def stale() -> None:
            ran.append("stale")

        (schedule,) = find_middleware(broker).all_schedules()
        old = message_for(schedule, 60_000, prefix="dramatiq-cron", timestamp_ms=60_000)
        assert any(isinstance(m, AgeLimit) for m in broker.middleware)
        with running_worker(broker, worker_timeout=50) as worker:
            plain.send()
            broker.enqueue(old)
            broker.join("default", fail_fast=False)
            worker.join()
        assert ran == ["plain"]
        assert sent.check_ins == []
    finally:
        broker.close()


def test_nothing_is_sent_or_looked_up_while_sentry_is_not_initialised(broker: StubBroker) -> None:
    ran: list[int] = []

    @dramatiq.actor(cron="* * * * *")
    def quiet() -> None:
        ran.append(1)

    run(broker, CronSimulator(broker, now=T0), by=dt.timedelta(minutes=2))

    assert len(ran) == 2
    (sentry,) = [m for m in broker.middleware if isinstance(m, SentryCrons)]
    assert sentry._cron is None  # never even looked for the schedule


def test_a_runtime_schedule_has_a_monitor_of_its_own_unless_turned_off(broker: StubBroker, sent: Envelopes) -> None:
    @dramatiq.actor
    def report(tenant: int) -> None: ...

    simulator = CronSimulator(broker, now=T0)
    cron = find_middleware(broker)
    cron.add(report, Schedule(every=3_600_000, kwargs={"tenant": 42}, timezone="Asia/Tokyo"), name="tenant-42")
    run(broker, simulator, by=dt.timedelta(hours=1))

    slug = monitor_slug("report:tenant-42")
    assert sent.statuses(slug) == ["in_progress", "ok"]
    assert sent.check_ins[0]["monitor_config"]["schedule"] == {"type": "interval", "value": 1, "unit": "hour"}
    assert sent.check_ins[0]["monitor_config"]["timezone"] == "Asia/Tokyo"

    (sentry,) = [m for m in broker.middleware if isinstance(m, SentryCrons)]
    sentry.runtime = False
    run(broker, simulator, by=dt.timedelta(hours=1))
    assert sent.statuses(slug) == ["in_progress", "ok"]


@pytest.mark.parametrize(
    "schedule_id",
    [
        "send_report",
        "send_report/nightly",
        "send_report:tenant-42",
        "Send_Report",
        "a-b",
        "a/b",
        "a:b",
        "x" * 80,
        "x" * 80 + "/y",
        "report:1234",
        "report:" + "Ä" * 10,
    ],
)
def test_a_monitor_slug_is_valid_for_sentry_and_stable(schedule_id: str) -> None:
    slug = monitor_slug(schedule_id)
    assert SLUG.match(slug), slug
    assert monitor_slug(schedule_id) == slug


def test_monitor_slugs_keep_valid_ids_and_tell_every_other_id_apart() -> None:
    assert monitor_slug("send_report") == "send_report"
    assert monitor_slug("send_report/nightly").startswith("send_report-nightly-")
    ids = ["a-b", "a/b", "a:b", "A-b", "x" * 80, "x" * 80 + "y", "report:tenant-1", "report/tenant-1"]
    assert len({monitor_slug(i) for i in ids}) == len(ids)


def bound(spec: str | Schedule) -> Any:
    (schedule,) = schedules_for_actor(
        "job", "default", spec, timezone="UTC", catch_up="each", catch_up_window=1, time_limit=1, signature=None
    )
    return schedule


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("@daily", {"type": "crontab", "value": "0 0 * * *"}),
        ("*/10 * 9-17 * * MON-FRI", {"type": "crontab", "value": "* 9-17 * * MON-FRI"}),
        (Schedule(every=1000), {"type": "interval", "value": 1, "unit": "minute"}),
        (Schedule(every=90_000), {"type": "interval", "value": 2, "unit": "minute"}),
        (Schedule(every=300_000), {"type": "interval", "value": 5, "unit": "minute"}),
        (Schedule(every=7_200_000, offset=60_000), {"type": "interval", "value": 2, "unit": "hour"}),
        (Schedule(every=86_400_000), {"type": "interval", "value": 1, "unit": "day"}),
        (Schedule(every=1_209_600_000), {"type": "interval", "value": 2, "unit": "week"}),
    ],
)
def test_the_monitor_schedule_is_the_crontab_in_minutes_or_the_interval(
    spec: str | Schedule, expected: dict[str, Any]
) -> None:
    assert monitor_config(bound(spec))["schedule"] == expected


def test_margin_runtime_and_threshold_come_from_grace_max_runtime_and_failure_threshold() -> None:
    config = monitor_config(bound("0 3 * * *"), grace=90_000, max_runtime=1_800_000, failure_threshold=3)
    assert config == {
        "schedule": {"type": "crontab", "value": "0 3 * * *"},
        "timezone": "UTC",
        "checkin_margin": 2,
        "max_runtime": 30,
        "failure_issue_threshold": 3,
        "recovery_threshold": 1,
    }
    assert monitor_config(bound("0 3 * * *"), grace=1000, max_runtime=1)["checkin_margin"] == 1


def test_a_runtime_schedule_whose_definition_cannot_be_read_still_checks_in_and_warns_once(
    redis_server: RedisServer, sent: Envelopes, caplog: pytest.LogCaptureFixture
) -> None:
    """Given runtime schedules on a Redis that is down, Then their runs
    still check in (without a configuration: Sentry keeps the stored one),
    the jobs run, and one WARNING says why, not one per message."""
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(redis=redis_server.url))
    broker.add_middleware(SentryCrons())
    try:
        ran: list[int] = []

        @dramatiq.actor(broker=broker)
        def report(tenant: int) -> None:
            ran.append(tenant)

        redis_server.stop()
        with running_worker(broker, worker_timeout=50) as worker:
            for tenant in (1, 2, 3):
                options = {"cron_schedule": f"report:tenant-{tenant}", "cron_tick": "2030-01-01T00:00:00+00:00"}
                broker.enqueue(report.message_with_options(args=(tenant,), **options))
            broker.join("default")
            worker.join()
        assert sorted(ran) == [1, 2, 3]
        assert [c["status"] for c in sent.check_ins].count("ok") == 3
        assert all("monitor_config" not in c for c in sent.check_ins)
        warnings = [r for r in caplog.records if r.name.startswith("dramatiq_cron_middleware.sentry")]
        assert len(warnings) == 1 and "Cannot read runtime schedules" in warnings[0].getMessage(), warnings
        assert not any(r.exc_info for r in warnings)
    finally:
        broker.close()
