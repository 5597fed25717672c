"""Delivering alerts: each sink on its own, so that a slow or failing one
never holds back another (as Alertmanager's receivers are independent).

- The WARNING line is logged by the deciding thread the moment the alert
  is decided (:func:`log_alert`): nothing can delay it.
- ``on_alert`` and the webhook each have an outbox of their own in Redis,
  written in the same fenced step as the health change, and a thread of
  their own (:class:`OutboxDelivery`), oldest first.  ``on_alert`` is
  called once per alert in a process (its exceptions are logged, and the
  alert leaves its outbox); the webhook is retried with back-off while it
  fails, up to a bound (:data:`WEBHOOK_GIVE_UP`), then the alert is
  dropped with a WARNING.  A new leader delivers what is left, so each
  alert reaches each of these two at least once.
- Every POST of an alert carries the same ``Idempotency-Key`` header and
  ``id`` field (:attr:`Alert.id`): a delivery that timed out may have
  reached the receiver, and its retry is the same alert, not a new one.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import unquote, urlsplit, urlunsplit

from ..leader.reports import Episode
from ..store.abc import RunStore
from ..store.connection import redact
from ..store.runs import OUTBOXES
from .records import Alert

__all__ = [
    "MAX_BACKOFF",
    "OUTBOXES",
    "WEBHOOK_GIVE_UP",
    "WEBHOOK_TIMEOUT",
    "OutboxDelivery",
    "Webhook",
    "callback_delivery",
    "log_alert",
    "webhook_delivery",
]

#: How long the webhook may take to answer, seconds.
WEBHOOK_TIMEOUT = 5.0
#: The longest wait between two webhook attempts, seconds.
MAX_BACKOFF = 60.0
#: How long the webhook is retried for one alert, seconds (by this
#: process's monotonic clock, from its first attempt): then it is dropped.
WEBHOOK_GIVE_UP = 3600.0

# Answers that retrying cannot change (the receiver refuses this alert):
# every 4xx but timeout, too early and too many requests.
_RETRIED_4XX = frozenset({408, 425, 429})


def log_alert(logger: logging.Logger, alert: Alert) -> None:
    """The log sink: one WARNING line."""
    tick = "" if alert.tick_ms is None else f" (tick {alert.to_json()['tick']})"
    error = f": {alert.error}" if alert.error else ""
    logger.warning("Cron schedule %s is %s, was %s%s%s.", alert.schedule_id, alert.state, alert.previous, tick, error)


class Webhook:
    """POSTs an alert's JSON to a URL, with its :attr:`Alert.id` as the
    ``Idempotency-Key`` header.  User and password in the URL become a
    basic ``Authorization`` header; they and the query string (which may
    carry a token) appear in no log line (:attr:`shown`).

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
        #: The URL as logged: no credentials, no query.
        self.shown = urlunsplit((parts.scheme, netloc, parts.path or "/", "", ""))
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json", "User-Agent": "dramatiq-cron-middleware"}
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()

    def post(self, alert: Alert) -> None:
        """POST the alert; raises on a failure (no answer, or not 2xx)."""
        body = json.dumps(alert.to_json()).encode()
        headers = {**self._headers, "Idempotency-Key": alert.id}
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if not 200 <= response.status < 300:
                raise urllib.error.HTTPError(self.url, response.status, "not 2xx", response.headers, None)


class OutboxDelivery:
    """Delivers one outbox to one sink, oldest first (see :meth:`deliver`).

    Parameters:
      outbox: Where the alerts wait.
      name: The outbox's name (:data:`OUTBOXES`).
      send: Delivers one alert; raises when it failed.
      logger: Gets the WARNINGs of a failing sink.
      retry: True: a failure is retried with back-off (the alert stays
        first) until ``give_up`` seconds after its first attempt; False: a
        failure is logged and the alert leaves the outbox (``on_alert``).
      give_up: See ``retry``.  Defaults to :data:`WEBHOOK_GIVE_UP`.
      shown: The sink as logged (the webhook's URL without credentials).
      monotonic: The clock of ``give_up``.
    """

    def __init__(
        self,
        *,
        outbox: RunStore,
        name: str,
        send: Callable[[Alert], object],
        logger: logging.Logger,
        retry: bool,
        give_up: float = WEBHOOK_GIVE_UP,
        shown: str = "",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.outbox = outbox
        self.name = name
        self.send = send
        self.logger = logger
        self.retry = retry
        self.give_up = give_up
        self.shown = shown or name
        self.monotonic = monotonic
        self._done: set[str] = set()  # delivered, not yet removed (Redis failed)
        self._failing: Episode[str] = Episode()
        self._failures = 0
        self._first_attempt: tuple[str, float] | None = None

    def deliver(self, *, go_on: Callable[[], bool] = lambda: True) -> float | None:
        """Deliver the outbox's alerts, oldest first, while ``go_on()``;
        None when it is empty, else how many seconds to wait before the
        next attempt (the sink failed).  Raises when the outbox cannot be
        read or written (Redis)."""
        while go_on():
            pending = self.outbox.alerts(100, outbox=self.name)
            if not pending:
                return None
            for text in pending:
                if not go_on():
                    return None
                if text not in self._done and not self._deliver_one(text):
                    self._failures += 1
                    return float(min(0.5 * 2 ** (self._failures - 1), MAX_BACKOFF))
                self._failures = 0
                self._first_attempt = None
                self._done.add(text)
                self.outbox.alert_delivered(text, outbox=self.name)
                self._done.discard(text)
        return None

    def _deliver_one(self, text: str) -> bool:
        """Whether the alert is done with: delivered, unreadable, refused for
        good, or given up on."""
        try:
            alert = Alert.loads(text)
        except (ValueError, KeyError, TypeError):
            self.logger.warning("Dropped an unreadable alert from the %s outbox: %r.", self.name, text[:200])
            return True
        try:
            self.send(alert)
        except Exception as exc:
            return self._failed(alert, exc)
        if self._failing.recovered() is not None:
            self.logger.warning("Alert %s answers again.", self.shown)
        return True

    def _failed(self, alert: Alert, exc: Exception) -> bool:
        reason = redact(f"{type(exc).__name__}: {exc}")
        if not self.retry:
            self.logger.warning(
                "%s raised on the alert of %s (%s); the other sinks still get it.",
                self.shown,
                alert.schedule_id,
                reason,
            )
            return True
        now = self.monotonic()
        if self._first_attempt is None or self._first_attempt[0] != alert.id:
            self._first_attempt = (alert.id, now)
        refused = isinstance(exc, urllib.error.HTTPError) and 400 <= exc.code < 500 and exc.code not in _RETRIED_4XX
        if refused or now - self._first_attempt[1] >= self.give_up:
            self.logger.warning(
                "Alert %s %s the alert %s of %s (%s -> %s, %s); dropped it, the next alerts go on.",
                self.shown,
                "refused" if refused else f"failed for {self.give_up:.0f} s on",
                alert.id,
                alert.schedule_id,
                alert.previous,
                alert.state,
                reason,
            )
            return True
        if self._failing.failing(type(exc).__name__):
            self.logger.warning(
                "Alert %s fails (%s); retrying with back-off (the same alert id each time), "
                "alerts wait in its outbox; the log and on_alert do not wait.",
                self.shown,
                reason,
            )
        return False


def callback_delivery(outbox: RunStore, on_alert: Callable[[Alert], object], logger: logging.Logger) -> OutboxDelivery:
    """``on_alert``'s delivery: called once per alert, never retried."""
    return OutboxDelivery(outbox=outbox, name="on_alert", send=on_alert, logger=logger, retry=False)


def webhook_delivery(outbox: RunStore, webhook: Webhook, logger: logging.Logger) -> OutboxDelivery:
    """The webhook's delivery: retried with back-off, up to :data:`WEBHOOK_GIVE_UP`."""
    return OutboxDelivery(
        outbox=outbox,
        name="webhook",
        send=webhook.post,
        logger=logger,
        retry=True,
        shown=f"webhook {webhook.shown}",
    )
