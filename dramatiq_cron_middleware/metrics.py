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
import time
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger

from .errors import CronConfigurationError
from .leader.reports import Episode
from .leader.thread import LeaderObserver
from .middleware import find_middleware
from .monitoring.read import check_report
from .monitoring.records import HEALTH_STATES, ScheduleHealth
from .store.connection import redact

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
# Run durations: a cleanup takes milliseconds, a nightly export hours.
_RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 21600)


def _own_dir() -> str:
    # One directory per dramatiq instance: the workers and the exposition
    # fork share a parent (the main dramatiq process), other instances on
    # the host do not.
    return os.environ.get(ENV_DIR) or os.path.join(tempfile.gettempdir(), f"dramatiq-cron-metrics-{os.getppid()}")


class CronMetrics(Middleware):
    """Exports the cron scheduler's metrics to Prometheus.

    Metrics (all prefixed ``dramatiq_cron_``): ``leader`` (1 in the
    instance whose process leads), ``leadership_changes_total`` (by
    ``change``: gained, lost), ``ticks_total`` (by ``schedule`` and
    ``outcome``), ``fire_lag_seconds`` (enqueue time minus the tick),
    ``lease_renew_seconds`` and ``last_fire_timestamp_seconds`` (per
    ``schedule``); from the workers' own hooks, per ``schedule``:
    ``runs_total`` (by ``outcome``: succeeded, failed, retrying, dropped),
    ``run_duration_seconds`` and ``last_success_timestamp_seconds``; and
    from the leading process, what ``dramatiq-cron check`` reports: per
    ``schedule`` and ``state``, ``health`` (1 for the schedule's health, 0
    for the other states; runtime schedules only up to
    ``runtime_health_limit``), per ``state`` ``runtime_health`` (how many
    runtime schedules are in it), and ``replicas_unconfirmed`` (1 in an
    instance with a process whose writes too few Redis replicas
    acknowledge: nothing fires).  No metric carries a ``pid`` label.

    Parameters:
      host(str): Address the exposition server binds when dramatiq's
        ``Prometheus`` middleware is not in use.  Defaults to None, meaning
        ``DRAMATIQ_CRON_METRICS_HOST``, else ``"0.0.0.0"``.
      port(int): Its port.  Defaults to None, meaning
        ``DRAMATIQ_CRON_METRICS_PORT``, else 9192.
      health_interval(int): How often, in milliseconds, the leading
        process reads every schedule's health into the ``health`` gauges
        (one read of them all, as ``check`` does).  Defaults to 15000
        (Prometheus' default scrape interval); None exports no health
        (seven series per schedule).
      runtime_health_limit(int): The most runtime schedules exported one by
        one in ``health``; with more, only their counts per state
        (``runtime_health``) are, so 100,000 tenants cost 7 series, not
        700,000.  Declared schedules are always exported one by one.
        Defaults to 1000; None means no limit.

    Raises:
      CronConfigurationError: when prometheus-client is not installed.
    """

    def __init__(
        self,
        *,
        host: str | None = None,
        port: int | None = None,
        health_interval: int | None = 15_000,
        runtime_health_limit: int | None = 1000,
    ) -> None:
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        if importlib.util.find_spec("prometheus_client") is None:
            raise CronConfigurationError(
                "CronMetrics needs prometheus-client: pip install 'dramatiq-cron-middleware[prometheus]'"
            )
        self.host = host or os.environ.get(ENV_HOST) or "0.0.0.0"
        self.port = port if port is not None else int(os.environ.get(ENV_PORT) or _DEFAULT_PORT)
        if health_interval is not None and (
            isinstance(health_interval, bool) or not isinstance(health_interval, int) or health_interval <= 0
        ):
            raise CronConfigurationError(
                f"CronMetrics: health_interval must be a positive number of milliseconds or None, "
                f"got {health_interval!r}"
            )
        self.health_interval = health_interval
        if runtime_health_limit is not None and (
            isinstance(runtime_health_limit, bool)
            or not isinstance(runtime_health_limit, int)
            or runtime_health_limit < 0
        ):
            raise CronConfigurationError(
                f"CronMetrics: runtime_health_limit must be a number of schedules (0 or more) or None, "
                f"got {runtime_health_limit!r}"
            )
        self.runtime_health_limit = runtime_health_limit
        self.directory: str | None = None
        self.own_exposition = False
        self.observer: _Observer | None = None
        self.runs: _Runs | None = None

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
        guard = _Guard(self.logger)
        self.runs = _Runs(guard=guard)
        health = None
        if self.health_interval is not None:
            health = _Health(
                read=lambda: check_report(cron, broker).schedules,
                interval_s=self.health_interval / 1000,
                runs=self.runs,
                logger=self.logger,
                runtime_limit=self.runtime_health_limit,
            )
        self.observer = _Observer(guard=guard, health=health)
        cron.observe_leader(self.observer)

    def before_process_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Note when a cron message starts."""
        if self.runs is not None and "cron_schedule" in message.options:
            self.runs.started(message.message_id)

    def after_process_message(
        self,
        broker: Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Observe the duration of an attempt of a cron message."""
        if self.runs is not None and "cron_schedule" in message.options:
            self.runs.finished(message, raised=exception is not None)

    def after_ack(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Count an attempt that succeeded, or failed and is retried."""
        if self.runs is not None and "cron_schedule" in message.options:
            self.runs.settled(message, failed=False)

    def after_nack(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Count an attempt that failed for good."""
        if self.runs is not None and "cron_schedule" in message.options:
            self.runs.settled(message, failed=True)

    def after_skip_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Count a cron message that did not run (``max_age``, a duplicate)."""
        if self.runs is not None and "cron_schedule" in message.options:
            self.runs.dropped(message)

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Drop this process's live gauges from the exposition."""
        if self.directory is None:
            return
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid(), self.directory)  # type: ignore[no-untyped-call]


class _Guard:
    """Metrics must never stop the leader nor fail a message: an update that
    raises is logged once, not per tick or message."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self._failed = False

    def __call__(self, update: Any, *args: Any) -> None:
        try:
            update(*args)
        except Exception as exc:
            if not self._failed:
                self._failed = True
                self.logger.warning("Updating cron metrics failed (%s); further failures are not logged.", exc)


class _Runs:
    """Counts and times the attempts of cron messages run in this process."""

    def __init__(self, *, guard: _Guard) -> None:
        import prometheus_client as prom

        self._guard = guard
        self._started: dict[str, float] = {}  # message id -> monotonic start
        self._raised: dict[str, bool] = {}  # message id -> whether the finished attempt raised
        registry = prom.CollectorRegistry()  # values live in the multiprocess files
        self.runs = prom.Counter(
            "dramatiq_cron_runs",
            "Finished attempts of cron messages, by outcome (succeeded, failed, retrying, dropped).",
            ["schedule", "outcome"],
            registry=registry,
        )
        self.duration = prom.Histogram(
            "dramatiq_cron_run_duration_seconds",
            "How long an attempt of a cron message ran.",
            ["schedule"],
            buckets=_RUN_BUCKETS,
            registry=registry,
        )
        self.last_success = prom.Gauge(
            "dramatiq_cron_last_success_timestamp_seconds",
            "When a run of the schedule last succeeded (Unix time).",
            ["schedule"],
            registry=registry,
            multiprocess_mode="max",
        )

    def started(self, message_id: str) -> None:
        self._started[message_id] = time.monotonic()

    def finished(self, message: dramatiq.broker.MessageProxy, *, raised: bool) -> None:
        # Whether dramatiq retries is not known yet: after-hooks run in the
        # reverse order of the middleware, so Retries (a default, added
        # first) has not looked at the exception.  The ack or nack says.
        started = self._started.pop(message.message_id, None)
        self._raised[message.message_id] = raised
        if started is not None:
            duration = time.monotonic() - started
            self._guard(lambda: self.duration.labels(str(message.options["cron_schedule"])).observe(duration))

    def settled(self, message: dramatiq.broker.MessageProxy, *, failed: bool) -> None:
        raised = self._raised.pop(message.message_id, None)
        if raised is None:  # skipped, or not started in this process
            return
        outcome = "failed" if failed else "retrying" if raised else "succeeded"
        self._guard(self._count, str(message.options["cron_schedule"]), outcome)

    def _count(self, schedule_id: str, outcome: str) -> None:
        self.runs.labels(schedule_id, outcome).inc()
        if outcome == "succeeded":
            self.last_success.labels(schedule_id).set(time.time())

    def succeeded_at(self, schedule_id: str, at_s: float) -> None:
        """A success recorded in Redis (so a restarted instance shows it)."""
        self.last_success.labels(schedule_id).set(at_s)

    def dropped(self, message: dramatiq.broker.MessageProxy) -> None:
        self._started.pop(message.message_id, None)
        self._guard(self._count, str(message.options["cron_schedule"]), "dropped")


class _Health:
    """While this process leads, reads every schedule's health (what
    ``check`` reports) into gauges on a thread of its own, every
    ``interval_s``; when it stops leading, sets them all to 0.  So the
    current leader's process is the only one with a state at 1, in its
    instance's exposition (the gauges keep the most recent value of any
    live process) and across instances (``max by (schedule, state)``)."""

    def __init__(
        self,
        *,
        read: Callable[[], list[ScheduleHealth]],
        interval_s: float,
        runs: _Runs,
        logger: Any,
        runtime_limit: int | None = 1000,
    ) -> None:
        import prometheus_client as prom

        self.read = read
        self.runtime_limit = runtime_limit
        self.interval_s = interval_s
        self.runs = runs
        self.logger = logger
        self.gauge = prom.Gauge(
            "dramatiq_cron_health",
            "1 for the schedule's health (as dramatiq-cron check reports it), 0 for the other states.",
            ["schedule", "state"],
            registry=prom.CollectorRegistry(),  # values live in the multiprocess files
            multiprocess_mode="livemostrecent",
        )
        self.runtime_gauge = prom.Gauge(
            "dramatiq_cron_runtime_health",
            "How many runtime schedules are in each health state (as dramatiq-cron check reports it).",
            ["state"],
            registry=prom.CollectorRegistry(),
            multiprocess_mode="livemostrecent",
        )
        self._lock = threading.Lock()  # one writer of the gauges at a time
        self._shown: dict[str, str] = {}  # schedule id -> the state at 1
        self._stop: threading.Event | None = None
        self._failing: Episode[str] = Episode()

    def lead(self, leading: bool) -> None:
        """Start reading when this process leads, stop when it no longer does."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        if leading:
            self._stop = threading.Event()
            threading.Thread(target=self._run, args=(self._stop,), name="cron-health-metrics", daemon=True).start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.refresh(stop)
            stop.wait(self.interval_s)
        with self._lock:
            if self._stop is None:  # not leading again meanwhile: the new term's thread shows its own
                self._show({})
                self._count_runtime([])

    def refresh(self, stop: threading.Event | None = None) -> None:
        """Read the health once and set the gauges (unless ``stop`` was set
        meanwhile); a schedule gone since the last read has every state at 0."""
        try:
            healths = self.read()
        except Exception as exc:  # Redis down: the gauges keep their last values
            if self._failing.failing(type(exc).__name__):
                self.logger.warning("Cron health metrics cannot be read (%s).", redact(f"{type(exc).__name__}: {exc}"))
            return
        if self._failing.recovered() is not None:
            self.logger.warning("Cron health metrics are read again.")
        with self._lock:
            if stop is not None and stop.is_set():
                return
            self._show(self._one_by_one(healths))
            self._count_runtime(healths)
        for schedule in healths:
            last = schedule.last_run
            if last is not None and last.outcome == "succeeded" and last.finished_ms is not None:
                self.runs.succeeded_at(schedule.schedule_id, last.finished_ms / 1000)

    def _one_by_one(self, healths: list[ScheduleHealth]) -> dict[str, str]:
        """The schedules exported one by one: the declared ones, and the
        runtime ones (ids ``actor:name``) unless more than the limit."""
        states = {s.schedule_id: s.health for s in healths}
        runtime = [sid for sid in states if ":" in sid]
        if self.runtime_limit is not None and len(runtime) > self.runtime_limit:
            for sid in runtime:
                del states[sid]
        return states

    def _count_runtime(self, healths: list[ScheduleHealth]) -> None:
        counts = dict.fromkeys(HEALTH_STATES, 0)
        for schedule in healths:
            if ":" in schedule.schedule_id and schedule.health in counts:
                counts[schedule.health] += 1
        for state, count in counts.items():
            self.runtime_gauge.labels(state).set(count)

    def _show(self, states: dict[str, str]) -> None:
        for schedule_id in self._shown.keys() | states.keys():
            current = states.get(schedule_id)
            if self._shown.get(schedule_id) == current and current is not None:
                continue  # unchanged: seven writes saved
            for state in HEALTH_STATES:
                self.gauge.labels(schedule_id, state).set(1 if state == current else 0)
        self._shown = states


class _Observer(LeaderObserver):
    """Turns what the leader thread reports into metric updates."""

    def __init__(self, *, guard: _Guard, health: _Health | None) -> None:
        import prometheus_client as prom

        self._guard = guard
        self._health = health
        registry = prom.CollectorRegistry()  # values live in the multiprocess files
        self.leader = prom.Gauge(
            "dramatiq_cron_leader",
            "1 while a process of this instance leads the cron scheduler.",
            registry=registry,
            multiprocess_mode="livesum",
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
            "1 while too few Redis replicas acknowledge the writes of a process of this instance (nothing fires).",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.leader.set(0)
        self.unconfirmed.set(0)

    def leadership_changed(self, *, epoch: int, leading: bool) -> None:
        """Set the leader gauge and count the change."""
        self._guard(self._leadership_changed, leading)

    def _leadership_changed(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)
        self.changes.labels("gained" if leading else "lost").inc()
        if self._health is not None:
            self._health.lead(leading)

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
