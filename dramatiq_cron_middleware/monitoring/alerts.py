"""Delivering alerts from the outbox: a WARNING, ``on_alert`` and the
webhook, on a thread of their own so that a slow receiver never holds up
the leader.

An alert leaves the outbox only once every sink had it: the log line and
``on_alert`` once per alert in this process, the webhook until it answers
2xx (retried with back-off, in order).  A new leader delivers what is left,
so each alert is delivered at least once.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

from ..leader.reports import Episode
from ..store.connection import redact
from .records import Alert

__all__ = ["AlertDelivery", "Outbox", "Webhook"]

#: How long the webhook may take to answer, seconds.
WEBHOOK_TIMEOUT = 5.0
#: The longest wait between two webhook attempts, seconds.
MAX_BACKOFF = 60.0


class Outbox(Protocol):
    """The alert outbox (``store.runs.RedisRuns`` or the in-memory store's)."""

    def alerts(self, limit: int) -> list[str]: ...

    def alert_delivered(self, alert: str) -> None: ...


class Webhook:
    """POSTs an alert's JSON to a URL.  User and password in the URL become
    a basic ``Authorization`` header and appear in no log line.

    Parameters:
      url: ``http(s)://[user:password@]host[:port]/path``.
      timeout: Seconds the receiver may take.
    """

    def __init__(self, url: str, *, timeout: float = WEBHOOK_TIMEOUT) -> None:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        self.url = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json", "User-Agent": "dramatiq-cron-middleware"}
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()

    def post(self, alert: Alert) -> None:
        """POST the alert; raises on a failure (no answer, or not 2xx)."""
        body = json.dumps(alert.to_json()).encode()
        request = urllib.request.Request(self.url, data=body, headers=self._headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if not 200 <= response.status < 300:
                raise urllib.error.HTTPError(self.url, response.status, "not 2xx", response.headers, None)


class AlertDelivery:
    """One pass over the outbox at a time (see :meth:`deliver`).

    Parameters:
      outbox: Where the alerts wait.
      logger: Gets the WARNING of each alert, and of failing sinks.
      on_alert: Called with each :class:`Alert`.  Defaults to None.
      webhook: Where each alert is POSTed.  Defaults to None.
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        logger: logging.Logger,
        on_alert: Callable[[Alert], object] | None = None,
        webhook: Webhook | None = None,
    ) -> None:
        self.outbox = outbox
        self.logger = logger
        self.on_alert = on_alert
        self.webhook = webhook
        self._told: set[str] = set()
        self._webhook_failing: Episode[str] = Episode()
        self._failures = 0

    def deliver(self, *, go_on: Callable[[], bool] = lambda: True) -> float | None:
        """Deliver the outbox's alerts, oldest first, while ``go_on()``;
        None when it is empty, else how many seconds to wait before the
        next attempt (the webhook failed).  Raises when the outbox cannot
        be read or written (Redis)."""
        while go_on():
            pending = self.outbox.alerts(100)
            if not pending:
                return None
            for text in pending:
                if not go_on():
                    return None
                if not self._deliver_one(text):
                    self._failures += 1
                    return float(min(0.5 * 2 ** (self._failures - 1), MAX_BACKOFF))
                self._failures = 0
                self.outbox.alert_delivered(text)
                self._told.discard(text)
        return None

    def _deliver_one(self, text: str) -> bool:
        try:
            alert = Alert.loads(text)
        except (ValueError, KeyError, TypeError):
            self.logger.warning("Dropped an unreadable alert from the outbox: %r.", text[:200])
            return True
        if text not in self._told:
            self._told.add(text)
            self._tell(alert)
        if self.webhook is None:
            return True
        try:
            self.webhook.post(alert)
        except Exception as exc:
            if self._webhook_failing.failing(type(exc).__name__):
                self.logger.warning(
                    "Alert webhook %s fails (%s); retrying with back-off, alerts wait in the outbox.",
                    self.webhook.url,
                    redact(f"{type(exc).__name__}: {exc}"),
                )
            return False
        if self._webhook_failing.recovered() is not None:
            self.logger.warning("Alert webhook %s answers again.", self.webhook.url)
        return True

    def _tell(self, alert: Alert) -> None:
        tick = "" if alert.tick_ms is None else f" (tick {alert.to_json()['tick']})"
        error = f": {alert.error}" if alert.error else ""
        self.logger.warning(
            "Cron schedule %s is %s, was %s%s%s.", alert.schedule_id, alert.state, alert.previous, tick, error
        )
        if self.on_alert is None:
            return
        try:
            self.on_alert(alert)
        except Exception as exc:
            self.logger.warning(
                "on_alert raised on the alert of %s (%s); the alert stays delivered to the other sinks.",
                alert.schedule_id,
                redact(f"{type(exc).__name__}: {exc}"),
            )
