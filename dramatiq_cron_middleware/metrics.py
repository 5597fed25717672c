"""Prometheus metrics of the cron scheduler (the ``prometheus`` extra).

Add :class:`CronMetrics` to the broker beside the
:class:`~dramatiq_cron_middleware.CronMiddleware`.  The metrics are kept in
prometheus-client's multiprocess mode, so every worker process of a
``dramatiq`` instance contributes to one exposition:

- with dramatiq's own ``Prometheus`` middleware on the broker, they are
  written where it keeps its metrics and appear in its exposition
  (``dramatiq_prom_port``, 9191 by default);
- without it, this middleware forks one small exposition server per
  ``dramatiq`` instance, like dramatiq does.

Nothing here imports prometheus-client unless the middleware is added, and
then only after the multiprocess directory is chosen (the library picks its
storage mode once, at import).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import threading
from typing import Any

from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger

from .errors import CronConfigurationError
from .leader.thread import LeaderObserver
from .middleware import find_middleware

__all__ = ["CronMetrics", "ENV_DIR", "ENV_HOST", "ENV_PORT", "serve_metrics"]

#: Environment variables read when the constructor arguments are omitted.
ENV_HOST = "DRAMATIQ_CRON_METRICS_HOST"
ENV_PORT = "DRAMATIQ_CRON_METRICS_PORT"
ENV_DIR = "DRAMATIQ_CRON_METRICS_DIR"

_DEFAULT_PORT = 9192
_CONFIG = "cron-exposition.json"
# Fire lag: on time is milliseconds, catch-up after an outage is minutes.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
_RENEW_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


def _own_dir() -> str:
    # One directory per dramatiq instance: the workers and the exposition
    # fork share a parent (the main dramatiq process), other instances on
    # the host do not.
    return os.environ.get(ENV_DIR) or os.path.join(tempfile.gettempdir(), f"dramatiq-cron-metrics-{os.getppid()}")


class CronMetrics(Middleware):
    """Exports the cron scheduler's metrics to Prometheus.

    Metrics (all prefixed ``dramatiq_cron_``): ``leader`` (1 in the
    process that leads, per ``pid``), ``leadership_changes_total`` (by
    ``change``: gained, lost), ``ticks_total`` (by ``schedule`` and
    ``outcome``), ``fire_lag_seconds`` (enqueue time minus the tick),
    ``lease_renew_seconds``, ``last_fire_timestamp_seconds`` (per
    ``schedule``) and ``replicas_unconfirmed`` (1 in a process whose writes
    too few Redis replicas acknowledge: nothing fires).

    Parameters:
      host(str): Address the exposition server binds when dramatiq's
        ``Prometheus`` middleware is not in use.  Defaults to None, meaning
        ``DRAMATIQ_CRON_METRICS_HOST``, else ``"0.0.0.0"``.
      port(int): Its port.  Defaults to None, meaning
        ``DRAMATIQ_CRON_METRICS_PORT``, else 9192.

    Raises:
      CronConfigurationError: when prometheus-client is not installed.
    """

    def __init__(self, *, host: str | None = None, port: int | None = None) -> None:
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        if importlib.util.find_spec("prometheus_client") is None:
            raise CronConfigurationError(
                "CronMetrics needs prometheus-client: pip install 'dramatiq-cron-middleware[prometheus]'"
            )
        self.host = host or os.environ.get(ENV_HOST) or "0.0.0.0"
        self.port = port if port is not None else int(os.environ.get(ENV_PORT) or _DEFAULT_PORT)
        self.directory: str | None = None
        self.own_exposition = False
        self.observer: _Observer | None = None

    @property
    def forks(self) -> list[Any]:
        """The exposition server, unless dramatiq's own serves the metrics."""
        return [serve_metrics] if self.own_exposition else []

    def after_process_boot(self, broker: Broker) -> None:
        """Choose the multiprocess directory, create the metrics and attach
        them to the broker's CronMiddleware."""
        cron = find_middleware(broker, needed_by="CronMetrics")
        if any(type(m).__name__ == "Prometheus" for m in broker.middleware):
            from dramatiq.middleware.prometheus import DB_PATH

            self.directory = DB_PATH
        else:
            self.directory = _own_dir()
            self.own_exposition = True
            os.makedirs(self.directory, exist_ok=True)
            # The exposition fork never imports the app; it learns where to
            # listen from this file.
            with open(os.path.join(self.directory, _CONFIG), "w") as f:
                json.dump({"host": self.host, "port": self.port}, f)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = self.directory
        self.observer = _Observer(logger=self.logger)
        cron.observe_leader(self.observer)

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Drop this process's live gauges from the exposition."""
        if self.directory is None:
            return
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid(), self.directory)  # type: ignore[no-untyped-call]


class _Observer(LeaderObserver):
    """Turns what the leader thread reports into metric updates."""

    def __init__(self, *, logger: Any) -> None:
        import prometheus_client as prom

        self.logger = logger
        self._failed = False
        registry = prom.CollectorRegistry()  # values live in the multiprocess files
        self.leader = prom.Gauge(
            "dramatiq_cron_leader",
            "1 while this process leads the cron scheduler.",
            registry=registry,
            multiprocess_mode="liveall",
        )
        self.changes = prom.Counter(
            "dramatiq_cron_leadership_changes",
            "Times this process gained or lost cron leadership.",
            ["change"],
            registry=registry,
        )
        self.ticks = prom.Counter(
            "dramatiq_cron_ticks", "Ticks decided, by outcome.", ["schedule", "outcome"], registry=registry
        )
        self.lag = prom.Histogram(
            "dramatiq_cron_fire_lag_seconds",
            "Enqueue time minus the scheduled tick.",
            ["schedule"],
            buckets=_LAG_BUCKETS,
            registry=registry,
        )
        self.renew = prom.Histogram(
            "dramatiq_cron_lease_renew_seconds", "Latency of lease renewals.", buckets=_RENEW_BUCKETS, registry=registry
        )
        self.last_fire = prom.Gauge(
            "dramatiq_cron_last_fire_timestamp_seconds",
            "When a schedule's message was last enqueued (Unix time).",
            ["schedule"],
            registry=registry,
            multiprocess_mode="max",
        )
        self.unconfirmed = prom.Gauge(
            "dramatiq_cron_replicas_unconfirmed",
            "1 while too few Redis replicas acknowledge this process's writes (nothing fires).",
            registry=registry,
            multiprocess_mode="liveall",
        )
        self.leader.set(0)
        self.unconfirmed.set(0)

    def leadership_changed(self, *, epoch: int, leading: bool) -> None:
        """Set the leader gauge and count the change."""
        self._guard(self._leadership_changed, leading)

    def _leadership_changed(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)
        self.changes.labels("gained" if leading else "lost").inc()

    def renewed(self, *, latency_ms: float) -> None:
        """Observe a renewal's latency."""
        self._guard(self.renew.observe, latency_ms / 1000)

    def tick_decided(self, *, schedule_id: str, outcome: str) -> None:
        """Count a decided tick."""
        self._guard(lambda: self.ticks.labels(schedule_id, outcome).inc())

    def enqueued(self, *, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        """Observe the fire lag and stamp the schedule's last fire."""
        self._guard(self._enqueued, schedule_id, tick_ms, lag_ms)

    def _enqueued(self, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        self.lag.labels(schedule_id).observe(max(lag_ms, 0) / 1000)
        self.last_fire.labels(schedule_id).set((tick_ms + max(lag_ms, 0)) / 1000)

    def replicas_confirmed(self, *, confirmed: bool) -> None:
        """Set the unconfirmed-writes gauge."""
        self._guard(self.unconfirmed.set, 0 if confirmed else 1)

    def _guard(self, update: Any, *args: Any) -> None:
        # Metrics must never stop the leader; say so once, not per tick.
        try:
            update(*args)
        except Exception as exc:
            if not self._failed:
                self._failed = True
                self.logger.warning("Updating cron metrics failed (%s); further failures are not logged.", exc)


def serve_metrics() -> int:
    """The exposition fork: serve the instance's multiprocess metrics over
    HTTP until stopped, then remove the directory."""
    directory = _own_dir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    logger = get_logger(__name__, "serve_metrics")  # type: ignore[no-untyped-call]
    try:
        with open(os.path.join(directory, _CONFIG)) as f:
            config = json.load(f)
    except (OSError, ValueError):
        config = {"host": os.environ.get(ENV_HOST) or "0.0.0.0", "port": int(os.environ.get(ENV_PORT) or _DEFAULT_PORT)}

    import prometheus_client as prom
    from prometheus_client import multiprocess

    registry = prom.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    try:
        server, _thread = prom.start_http_server(int(config["port"]), addr=str(config["host"]), registry=registry)
    except OSError as exc:
        logger.warning("Cron metrics exposition cannot listen on %s:%s: %s", config["host"], config["port"], exc)
        return 1
    logger.info("Serving cron metrics on http://%s:%s/metrics", config["host"], config["port"])
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
        if not os.environ.get(ENV_DIR):
            shutil.rmtree(directory, ignore_errors=True)
    return 0
