"""The monitoring threads of every worker process, busy only while the
process leads: one decides health (a turn every poll interval) and logs
each alert's WARNING as it decides it; one more per configured sink
(``on_alert``, the webhook) delivers that sink's outbox, so a slow or
failing sink holds up neither the leader, nor the decisions, nor another
sink.  They report a failing Redis once per episode."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from ..leader.firing import LeaderObserver
from ..leader.reports import Episode
from ..store.connection import redact
from ..store.runs import RedisRuns
from ..store.timing import Timing
from .alerts import OutboxDelivery, Webhook, callback_delivery, log_alert, webhook_delivery
from .config import MonitorConfig
from .health import Policy
from .monitor import HealthMonitor, Turn

__all__ = ["HealthObserver", "MonitorThreads", "monitor_threads"]


#: An idle leader's monitoring reads at most once per this many ``idle_wait``
#: (at the default lease: once a minute).
QUIET = 12


class HealthObserver(LeaderObserver):
    """Tells the monitor what the leader fired and missed, and passes
    everything on to ``inner`` (metrics)."""

    def __init__(self, monitor: HealthMonitor, inner: LeaderObserver | None) -> None:
        self.monitor = monitor
        self.inner = inner or LeaderObserver()

    def leadership_changed(self, *, epoch: int, leading: bool) -> None:
        if not leading:
            self.monitor.forget()
        self.monitor.told.set()  # a decide thread waiting in this process looks again at once
        self.inner.leadership_changed(epoch=epoch, leading=leading)

    def renewed(self, *, latency_ms: float) -> None:
        self.inner.renewed(latency_ms=latency_ms)

    def tick_decided(self, *, schedule_id: str, outcome: str) -> None:
        if outcome == "missed":
            self.monitor.missed(schedule_id)
        self.inner.tick_decided(schedule_id=schedule_id, outcome=outcome)

    def enqueued(self, *, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        self.monitor.fired(schedule_id, tick_ms)
        self.inner.enqueued(schedule_id=schedule_id, tick_ms=tick_ms, lag_ms=lag_ms)


class MonitorThreads:
    """The decide thread and a delivery thread per sink.

    A busy leader decides at most every ``interval``.  While runs are open
    (a fired tick not started yet, a run not finished, a change of health
    held back) it waits on Redis for the next run event (one blocking
    read) until the earliest deadline ahead, at most ``idle_wait``.  With
    nothing open it waits in this process, costing Redis nothing, until
    the leader tells it of a fired or missed tick, or ``quiet_wait`` at
    most: an idle leader's monitoring costs one read per ``quiet_wait``.
    (Run events for ticks this leader did not fire, such as a retry of a
    finished run or a message sent by hand, are thus decided within
    ``quiet_wait``.)

    Parameters:
      monitor: Decides health.
      deliveries: One per alert sink with an outbox.
      token: The lease token this process leads under, None while following.
      interval: Seconds between two turns at least (and between retries).
      idle_wait: Seconds a leader with open runs waits for a run event at most.
      quiet_wait: Seconds a leader with nothing open waits at most before
        it reads again.  Defaults to None, meaning ``QUIET * idle_wait``.
      logger: Where faults are reported.
      on_health: Told the health of the schedules each turn decided on
        (``CronMetrics``' gauges).  Defaults to None.
    """

    def __init__(
        self,
        *,
        monitor: HealthMonitor,
        deliveries: list[OutboxDelivery],
        token: Callable[[], str | None],
        interval: float,
        idle_wait: float,
        logger: logging.Logger,
        on_health: Callable[[dict[str, str]], object] | None = None,
        quiet_wait: float | None = None,
    ) -> None:
        self.monitor = monitor
        self.on_health = on_health
        self.deliveries = deliveries
        self.token = token
        self.interval = interval
        self.idle_wait = max(idle_wait, interval)
        self.quiet_wait = max(QUIET * self.idle_wait if quiet_wait is None else quiet_wait, self.idle_wait)
        self.logger = logger
        self.stopping = threading.Event()
        self._wakes = [threading.Event() for _ in deliveries]
        self._threads: list[threading.Thread] = []
        self._failing: Episode[str] = Episode()

    def start(self) -> None:
        threads = [threading.Thread(target=self._decide, name="cron-health", daemon=True)]
        for delivery, wake in zip(self.deliveries, self._wakes, strict=True):
            threads.append(
                threading.Thread(
                    target=self._deliver, args=(delivery, wake), name=f"cron-alerts-{delivery.name}", daemon=True
                )
            )
        for thread in threads:
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 0.1) -> None:
        """Tell every thread to stop, then :meth:`join` them."""
        self.stopping.set()
        self.monitor.told.set()
        for wake in self._wakes:
            wake.set()
        self.join(timeout)

    def join(self, timeout: float) -> None:
        """Wait ``timeout`` seconds at most for each thread: they are daemon
        threads, and one may be in a blocking read (up to ``idle_wait``) or a
        webhook call (up to its timeout); it ends with that, doing nothing
        more."""
        for thread in self._threads:
            thread.join(timeout)

    def _decide(self) -> None:
        leading = False
        while not self.stopping.is_set():
            token = self.token()
            if token is None:
                leading = False
                self.stopping.wait(self.interval)
                continue
            if not leading:  # a new leader delivers what its predecessor left in the outboxes
                leading = True
                for wake in self._wakes:
                    wake.set()
            try:
                turn = self.monitor.turn(token)
            except Exception as exc:
                self._fault(exc)
                self.stopping.wait(self.interval)
                continue
            self._recovered()
            for alert in turn.alerts:  # the log sink: at once, as decided
                log_alert(self.logger, alert)
            if turn.health and self.on_health is not None:
                self.on_health(turn.health)
            if turn.alerts:
                for wake in self._wakes:
                    wake.set()
            if turn.more:
                continue
            if self.stopping.wait(self.interval):
                return
            self._idle(turn)

    def _idle(self, turn: Turn) -> None:
        """Wait for a run event (runs are open) or for the leader to tell
        something (none is), until the next deadline at the latest."""
        if not turn.written and turn.now_ms == 0:
            return
        if turn.next_deadline_ms is None:  # nothing open: no event is awaited
            self.monitor.told.wait(self.quiet_wait)
            return
        wait_ms = min(int(self.idle_wait * 1000), turn.next_deadline_ms - turn.now_ms - int(self.interval * 1000))
        if wait_ms <= 0:
            return
        try:
            self.monitor.store.wait_for_event(turn.cursor, wait_ms)
        except Exception as exc:
            if not self.stopping.is_set():  # a stop may close what it waits on
                self._fault(exc)

    def _deliver(self, delivery: OutboxDelivery, wake: threading.Event) -> None:
        pause: float | None = None
        while not self.stopping.is_set():
            # Woken when an alert is stored (or leadership is won); after a
            # failure, after its backoff; else it reads rarely.
            wake.wait(self.quiet_wait if pause is None else pause)
            wake.clear()
            if self.stopping.is_set() or self.token() is None:
                continue
            try:
                pause = delivery.deliver(go_on=lambda: not self.stopping.is_set() and self.token() is not None)
            except Exception as exc:
                self._fault(exc)
                pause = None

    def _fault(self, exc: Exception) -> None:
        # One episode for every thread: they fail together when Redis does.
        # An unreachable Redis is the leader thread's WARNING in this same
        # process (one per outage); here it is only INFO, anything else is
        # monitoring's own fault and a WARNING.
        if self._failing.failing("redis"):
            unreachable = isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError))
            self.logger.log(
                logging.INFO if unreachable else logging.WARNING,
                "Run monitoring %s (%s): health is decided and alerts are sent once it answers.",
                "waits for Redis" if unreachable else "cannot work",
                redact(f"{type(exc).__name__}: {exc}"),
            )

    def _recovered(self) -> None:
        if self._failing.recovered() is not None:
            self.logger.info("Run monitoring works again.")  # the episode's WARNING was its start


def monitor_threads(
    *,
    runs: RedisRuns,
    config: MonitorConfig,
    subject: Callable[[str], tuple[str, str | None, Policy]],
    token: Callable[[], str | None],
    timing: Timing,
    logger: logging.Logger,
    on_health: Callable[[dict[str, str]], object] | None = None,
) -> MonitorThreads:
    """The threads of a leading process: ``subject(schedule id)`` gives a
    schedule's ``(actor, name, policy)``, ``token()`` the lease token it
    leads under (None while following), ``on_health`` is told the health
    each turn decided."""
    deliveries = []
    if config.on_alert is not None:
        deliveries.append(callback_delivery(runs, config.on_alert, logger))
    if config.alert_webhook:
        deliveries.append(webhook_delivery(runs, Webhook(config.alert_webhook), logger))
    return MonitorThreads(
        monitor=HealthMonitor(store=runs, schedule=subject, outboxes=[d.name for d in deliveries]),
        deliveries=deliveries,
        token=token,
        interval=timing.retry_interval,
        idle_wait=timing.renew_interval,
        logger=logger,
        on_health=on_health,
    )
