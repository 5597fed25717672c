"""The two monitoring threads of every worker process, busy only while the
process leads: one decides health (a turn every poll interval), the other
delivers alerts (so a slow webhook holds up neither the leader nor the
decisions).  Both report a failing Redis once per episode."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..leader.firing import LeaderObserver
from ..leader.reports import Episode
from ..store.connection import redact
from .alerts import AlertDelivery
from .monitor import HealthMonitor

__all__ = ["HealthObserver", "MonitorThreads"]


class HealthObserver(LeaderObserver):
    """Tells the monitor what the leader fired and missed, and passes
    everything on to ``inner`` (metrics)."""

    def __init__(self, monitor: HealthMonitor, inner: LeaderObserver | None) -> None:
        self.monitor = monitor
        self.inner = inner or LeaderObserver()

    def leadership_changed(self, *, epoch: int, leading: bool) -> None:
        if not leading:
            self.monitor.forget()
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
    """Parameters:
    monitor: Decides health.
    delivery: Delivers alerts.
    token: The lease token this process leads under, None while following.
    interval: Seconds between turns (and outbox checks) while idle.
    logger: Where faults are reported.
    """

    def __init__(
        self,
        *,
        monitor: HealthMonitor,
        delivery: AlertDelivery,
        token: Callable[[], str | None],
        interval: float,
        logger: logging.Logger,
    ) -> None:
        self.monitor = monitor
        self.delivery = delivery
        self.token = token
        self.interval = interval
        self.logger = logger
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._failing: Episode[str] = Episode()

    def start(self) -> None:
        for target, name in ((self._decide, "cron-health"), (self._deliver, "cron-alerts")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 1.0) -> None:
        self.stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)

    def _decide(self) -> None:
        pause = self.interval
        while not self.stopping.wait(pause):
            pause = self.interval
            token = self.token()
            if token is None:
                continue
            try:
                turn = self.monitor.turn(token)
            except Exception as exc:
                self._fault("deciding health", exc)
                continue
            self._recovered()
            if turn.alerts:
                self._wake.set()
            if turn.more:
                pause = 0.0

    def _deliver(self) -> None:
        pause: float | None = None
        while not self.stopping.is_set():
            self._wake.wait(self.interval if pause is None else pause)
            self._wake.clear()
            if self.stopping.is_set() or self.token() is None:
                continue
            try:
                pause = self.delivery.deliver(go_on=lambda: not self.stopping.is_set() and self.token() is not None)
            except Exception as exc:
                self._fault("delivering alerts", exc)
                pause = None

    def _fault(self, doing: str, exc: Exception) -> None:
        if self._failing.failing(doing):
            self.logger.warning(
                "Run monitoring: %s fails (%s); retrying every %.1f s.",
                doing,
                redact(f"{type(exc).__name__}: {exc}"),
                self.interval,
            )

    def _recovered(self) -> None:
        if self._failing.recovered() is not None:
            self.logger.warning("Run monitoring works again.")
