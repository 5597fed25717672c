"""Alert delivery (monitoring/alerts.py, monitoring/thread.py), in-process
against a real HTTP receiver on a loopback socket: each sink on its own (a
failing or slow webhook delays neither the log line nor ``on_alert``), the
webhook retried with back-off and a bound, every POST of an alert with the
same idempotency key, credentials and tokens in no log line."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dramatiq_cron_middleware.monitoring.alerts import (
    OutboxDelivery,
    Webhook,
    callback_delivery,
    webhook_delivery,
)
from dramatiq_cron_middleware.monitoring.health import Policy
from dramatiq_cron_middleware.monitoring.monitor import HealthMonitor
from dramatiq_cron_middleware.monitoring.records import Alert
from dramatiq_cron_middleware.monitoring.thread import HealthObserver, MonitorThreads
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryRuns, MemoryServer
from dramatiq_cron_middleware.store.lease import Acquired
from tests.support.instances import wait_for
from tests.support.stores import FakeTime

ALERT = Alert(
    schedule_id="report",
    actor="report",
    name=None,
    state="failing",
    previous="ok",
    tick_ms=1_900_000_000_000,
    at_ms=1_900_000_000_500,
    error="RuntimeError: no data",
)


class Receiver:
    """A webhook receiver on a real loopback socket.  ``answer`` is the
    status it answers (changed by the test); ``hold`` makes the first POST
    wait until the next one arrives (a receiver slower than the timeout).
    ``got`` keeps every request: (status, Idempotency-Key, body, auth, path)."""

    def __init__(self) -> None:
        self.answer = 204
        self.hold = False
        self.got: list[tuple[int, str, dict[str, Any], str, str]] = []
        self.lock = threading.Lock()
        self.second = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    first = not receiver.got and receiver.hold
                    status = receiver.answer
                    receiver.got.append(
                        (
                            status,
                            self.headers.get("Idempotency-Key", ""),
                            body,
                            self.headers.get("Authorization", ""),
                            self.path,
                        )
                    )
                    if len(receiver.got) > 1:
                        receiver.second.set()
                if first:
                    receiver.second.wait(60)  # answered only once the client gave up on it and sent again
                self.send_response(status)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return [(key, body) for status, key, body, _, _ in self.got if 200 <= status < 300]

    def close(self) -> None:
        self.second.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


def outbox(*alerts: Alert) -> MemoryRuns:
    runs = MemoryRuns(MemoryServer(now_ms=lambda: 0))
    for alert in alerts:
        runs.server.alerts["webhook"].append(alert.dumps())
        runs.server.alerts["on_alert"].append(alert.dumps())
    return runs


def test_a_failing_webhook_is_retried_with_back_off_with_one_idempotency_key(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.answer = 500
    runs = outbox(ALERT)
    url = f"http://hook:pa55word@127.0.0.1:{receiver.port}/cron?token=t0ken"
    delivery = webhook_delivery(runs, Webhook(url), logging.getLogger("alerts"))
    with caplog.at_level(logging.WARNING, logger="alerts"):
        assert delivery.deliver() == 0.5
        assert delivery.deliver() == 1.0
        receiver.answer = 204
        assert delivery.deliver() is None
    assert [key for _, key, _, _, _ in receiver.got] == [ALERT.id] * 3
    [(key, body)] = receiver.delivered()
    assert body == ALERT.to_json() and body["id"] == key == ALERT.id and body["name"] is None
    _, _, _, auth, path = receiver.got[-1]
    assert auth.startswith("Basic ") and path == "/cron?token=t0ken"
    assert runs.alerts(10, outbox="webhook") == []
    assert runs.alerts(10, outbox="on_alert") == [ALERT.dumps()]  # the other sink's outbox is its own
    lines = [r.getMessage() for r in caplog.records]
    assert sum("fails (HTTPError" in line for line in lines) == 1
    assert sum("answers again" in line for line in lines) == 1
    assert not any("pa55word" in line or "t0ken" in line for line in lines)


def test_a_receiver_slower_than_the_timeout_gets_the_same_idempotency_key_again(receiver: Receiver) -> None:
    """Issue 28 item 4: a POST that timed out may have reached the receiver;
    its retry carries the same Idempotency-Key and id, so the receiver can
    tell it is the same alert (it used to get six indistinguishable POSTs)."""
    receiver.hold = True
    runs = outbox(ALERT)
    delivery = webhook_delivery(
        runs, Webhook(f"http://127.0.0.1:{receiver.port}/", timeout=0.5), logging.getLogger("alerts")
    )
    assert delivery.deliver() is not None  # timed out: retried later
    wait_for(lambda: delivery.deliver() is None, timeout=60, what="the retry's delivery")
    keys = {(key, body["id"]) for _, key, body, _, _ in receiver.got}
    assert len(receiver.got) >= 2 and keys == {(ALERT.id, ALERT.id)}


def test_a_refused_alert_is_dropped_at_once_and_the_next_goes_on(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.answer = 400
    later = Alert(**{**ALERT.__dict__, "state": "ok", "previous": "failing", "error": None})
    runs = outbox(ALERT, later)
    delivery = webhook_delivery(runs, Webhook(f"http://127.0.0.1:{receiver.port}/"), logging.getLogger("alerts"))
    with caplog.at_level(logging.WARNING, logger="alerts"):
        assert delivery.deliver() is None
    assert [body["state"] for _, _, body, _, _ in receiver.got] == ["failing", "ok"]
    assert runs.alerts(10, outbox="webhook") == []
    assert sum("refused the alert" in r.getMessage() for r in caplog.records) == 2


def test_a_webhook_failing_past_the_bound_drops_the_alert(receiver: Receiver) -> None:
    receiver.answer = 503
    clock = [0.0]
    runs = outbox(ALERT)
    delivery = OutboxDelivery(
        outbox=runs,
        name="webhook",
        send=Webhook(f"http://127.0.0.1:{receiver.port}/").post,
        logger=logging.getLogger("alerts"),
        retry=True,
        give_up=600.0,
        monotonic=lambda: clock[0],
    )
    assert delivery.deliver() is not None
    clock[0] += 599.0
    assert delivery.deliver() is not None
    clock[0] += 1.0
    assert delivery.deliver() is None
    assert runs.alerts(10, outbox="webhook") == [] and len(receiver.got) == 3


def test_on_alert_raising_is_logged_and_the_alert_still_leaves_its_outbox(caplog: pytest.LogCaptureFixture) -> None:
    def broken(alert: Alert) -> None:
        raise ValueError("pager down")

    runs = outbox(ALERT)
    delivery = callback_delivery(runs, broken, logging.getLogger("alerts"))
    with caplog.at_level(logging.WARNING, logger="alerts"):
        assert delivery.deliver() is None
    assert runs.alerts(10, outbox="on_alert") == []
    assert [r.getMessage() for r in caplog.records if "on_alert raised" in r.getMessage()] == [
        "on_alert raised on the alert of report (ValueError: pager down); the other sinks still get it."
    ]


@pytest.mark.slow
def test_a_failing_webhook_holds_back_neither_the_log_line_nor_on_alert(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28 item 4: while the webhook answers 503, every later alert's
    WARNING and on_alert come at once (they used to wait 11-27 s behind
    the webhook's retries); the webhook then gets them all, in order."""
    receiver.answer = 503
    time = FakeTime()
    server = MemoryServer(now_ms=time.now_ms)
    runs = MemoryRuns(server)
    store = InMemoryStore(server, clock=ServerClock(monotonic=time.monotonic, wall=time.wall), ttl_ms=3_600_000)
    assert isinstance(store.lease.acquire(), Acquired)
    token = store.lease.token
    policy = Policy(grace_ms=1000, max_runtime_ms=5000, failure_threshold=1)
    told: list[Alert] = []
    logger = logging.getLogger("alerts")
    deliveries = [
        callback_delivery(runs, told.append, logger),
        webhook_delivery(runs, Webhook(f"http://127.0.0.1:{receiver.port}/"), logger),
    ]
    threads = MonitorThreads(
        monitor=HealthMonitor(
            store=runs, schedule=lambda sid: (sid, None, policy), outboxes=[d.name for d in deliveries]
        ),
        deliveries=deliveries,
        token=lambda: token,
        interval=0.01,
        idle_wait=0.05,
        logger=logger,
    )
    with caplog.at_level(logging.WARNING, logger="alerts"):
        threads.start()
        try:
            for n in range(4):
                sid = f"job{n}"
                runs.record_run("start", sid, time.ms, attempt=1, token=sid, host="h", pid=1)
                runs.record_run(
                    "finish", sid, time.ms, attempt=1, token=sid, host="h", pid=1, outcome="failed", error="E"
                )
                wait_for(lambda n=n: len(told) == n + 1, timeout=30, what=f"on_alert of alert {n + 1}")
            assert [a.schedule_id for a in told] == ["job0", "job1", "job2", "job3"]
            lines = [r.getMessage() for r in caplog.records if "is failing, was pending" in r.getMessage()]
            assert len(lines) == 4
            assert receiver.delivered() == [] and len(receiver.got) >= 1  # the webhook failed all along
            receiver.answer = 204
            wait_for(lambda: len(receiver.delivered()) == 4, timeout=60, what="the webhook's deliveries")
        finally:
            threads.stop(5.0)
    assert [key for key, _ in receiver.delivered()] == [a.id for a in told]
    assert {key for _, key, _, _, _ in receiver.got if key == told[0].id} == {told[0].id}


def test_a_quiet_decide_thread_looks_again_as_soon_as_leadership_changes() -> None:
    """Issue 32 (idle cost): Given a leading decide thread with nothing open,
    waiting in its process (a quiet wait of an hour), and a failed run
    recorded meanwhile by a worker, When the leader reports a change of
    leadership (a takeover after a lost lease), Then the thread takes a turn
    at once and alerts on the failure, instead of sleeping out its wait."""
    time = FakeTime()
    server = MemoryServer(now_ms=time.now_ms)
    runs = MemoryRuns(server)
    store = InMemoryStore(server, clock=ServerClock(monotonic=time.monotonic, wall=time.wall), ttl_ms=3_600_000)
    assert isinstance(store.lease.acquire(), Acquired)
    token = store.lease.token
    policy = Policy(grace_ms=1000, max_runtime_ms=5000, failure_threshold=1)
    told: list[Alert] = []
    logger = logging.getLogger("alerts")
    deliveries = [callback_delivery(runs, told.append, logger)]
    monitor = HealthMonitor(store=runs, schedule=lambda sid: (sid, None, policy), outboxes=[d.name for d in deliveries])
    turns: list[dict[str, str]] = []
    threads = MonitorThreads(
        monitor=monitor,
        deliveries=deliveries,
        token=lambda: token,
        interval=0.01,
        idle_wait=0.05,
        quiet_wait=3600,
        logger=logger,
        on_health=turns.append,
    )
    observer = HealthObserver(monitor, None)
    runs.record_run("start", "idle", time.ms, attempt=1, token="idle", host="h", pid=1)
    runs.record_run("finish", "idle", time.ms, attempt=1, token="idle", host="h", pid=1, outcome="ok")
    threads.start()
    try:
        wait_for(lambda: turns, timeout=30, what="the first turn")  # nothing open after it: a quiet wait
        runs.record_run("start", "job", time.ms, attempt=1, token="job", host="h", pid=1)
        runs.record_run("finish", "job", time.ms, attempt=1, token="job", host="h", pid=1, outcome="failed", error="E")
        observer.leadership_changed(epoch=2, leading=True)
        wait_for(lambda: told, timeout=30, what="the failure's alert")
        assert [a.state for a in told] == ["failing"]
    finally:
        threads.stop(5.0)
