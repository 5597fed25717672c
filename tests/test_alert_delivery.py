"""Alert delivery from the outbox (monitoring/alerts.py), in-process against
a real local HTTP receiver: retried with back-off until 2xx, each sink told
once, credentials and tokens in no log line."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from dramatiq_cron_middleware.monitoring.alerts import AlertDelivery, Webhook
from dramatiq_cron_middleware.monitoring.records import Alert
from dramatiq_cron_middleware.store.in_memory import MemoryRuns, MemoryServer

ALERT = Alert(
    schedule_id="report",
    actor="report",
    name="0 3 * * *",
    state="failing",
    previous="ok",
    tick_ms=1_900_000_000_000,
    at_ms=1_900_000_000_500,
    error="RuntimeError: no data",
)


class _Receiver(http.server.BaseHTTPRequestHandler):
    failures_left = 0
    got: ClassVar[list[tuple[dict[str, Any], str, str]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if _Receiver.failures_left > 0:
            _Receiver.failures_left -= 1
            self.send_response(500)
        else:
            _Receiver.got.append((body, self.headers.get("Authorization", ""), self.path))
            self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[int]:
    _Receiver.got, _Receiver.failures_left = [], 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def outbox() -> MemoryRuns:
    runs = MemoryRuns(MemoryServer(now_ms=lambda: 0))
    runs.server.alerts.append(ALERT.dumps())
    return runs


def test_a_failing_webhook_is_retried_with_back_off_and_each_sink_told_once(
    receiver: int, caplog: pytest.LogCaptureFixture
) -> None:
    _Receiver.failures_left = 2
    told: list[Alert] = []
    runs = outbox()
    url = f"http://hook:pa55word@127.0.0.1:{receiver}/cron?token=t0ken"
    delivery = AlertDelivery(
        outbox=runs, logger=logging.getLogger("alerts"), on_alert=told.append, webhook=Webhook(url)
    )
    with caplog.at_level(logging.WARNING, logger="alerts"):
        assert delivery.deliver() == 0.5
        assert delivery.deliver() == 1.0
        assert delivery.deliver() is None
    assert told == [ALERT]
    [(body, auth, path)] = _Receiver.got
    assert body == ALERT.to_json() and auth.startswith("Basic ") and path == "/cron?token=t0ken"
    assert runs.alerts(10) == []
    lines = [r.getMessage() for r in caplog.records]
    assert sum("is failing, was ok" in line for line in lines) == 1
    assert (
        sum("fails (HTTPError" in line for line in lines) == 1 and sum("answers again" in line for line in lines) == 1
    )
    assert not any("pa55word" in line or "t0ken" in line for line in lines)


def test_on_alert_raising_is_logged_and_the_alert_still_leaves_the_outbox(caplog: pytest.LogCaptureFixture) -> None:
    def broken(alert: Alert) -> None:
        raise ValueError("pager down")

    runs = outbox()
    delivery = AlertDelivery(outbox=runs, logger=logging.getLogger("alerts"), on_alert=broken)
    with caplog.at_level(logging.WARNING, logger="alerts"):
        assert delivery.deliver() is None
    assert runs.alerts(10) == []
    assert [r.getMessage() for r in caplog.records if "on_alert raised" in r.getMessage()] == [
        "on_alert raised on the alert of report (ValueError: pager down); the other sinks still get it."
    ]
