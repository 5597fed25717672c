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
from collections.abc import Callable, Container
from typing import Any

from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger

from .errors import CronConfigurationError
from .leader.reports import Episode
from .leader.thread import LeaderObserver
from .middleware import find_middleware
from .monitoring.read import check_report
from .monitoring.recorder import Run
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
    ``schedule``); from the ``CronMiddleware``'s run recorder (a sink of
    it), per ``schedule``:
    ``runs_total`` (by ``outcome``: succeeded, failed, retrying, dropped),
    ``run_duration_seconds`` and ``last_success_timestamp_seconds``; and
    from the leading process, as its run monitor decides it, what
    ``dramatiq-cron check`` reports: per
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
      health_interval(int): None exports no health (seven series per
        schedule); any positive number exports it.  The gauges follow the
        leader's decisions as it makes them (no periodic read); the value
        is kept for compatibility.  Defaults to 15000.
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
        self.health: _Health | None = None

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
        self.runs = _Runs()
        cron.run_recorder(broker).add(self.runs)
        if self.health_interval is not None:
            self.health = _Health(
                read=lambda: check_report(cron, broker).schedules,
                known=lambda: None if cron.leader is None else cron.leader.queue.schedules,
                runs=self.runs,
                logger=self.logger,
                runtime_limit=self.runtime_health_limit,
            )
        self.observer = _Observer(guard=guard, health=self.health)
        cron.observe_leader(self.observer)

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
    """Counts and times the attempts of cron messages run in this process,
    as the run recorder tells them (a sink of it, on its own thread)."""

    name = "metrics"

    def __init__(self) -> None:
        import prometheus_client as prom

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

    def started(self, run: Run) -> None:
        pass

    def finished(self, run: Run) -> None:
        if run.outcome != "dropped" and run.duration_s is not None:
            self.duration.labels(run.schedule_id).observe(run.duration_s)
        self.runs.labels(run.schedule_id, run.outcome).inc()
        if run.outcome == "succeeded":
            self.last_success.labels(run.schedule_id).set(time.time())


class _Health:
    """The leading process's health gauges: per schedule, 1 for its state
    and 0 for the six others.  They show what the leader's run monitor
    decides, turn by turn (:meth:`decided`), over one read of every
    schedule's health as ``check`` reports it when a term begins (the
    schedules the monitor has not decided on yet: a nightly job's health
    is known before its next run), with ``paused`` from the ticks the
    leader decides paused until the schedule fires again.  When the
    process stops leading, every gauge goes to 0: so the current leader's
    process is the only one with a state at 1 (``max by (schedule,
    state)`` across instances).  A schedule the leader no longer has
    (``known()``, looked at every ``prune_s`` at most) has every state at
    0 again."""

    def __init__(
        self,
        *,
        read: Callable[[], list[ScheduleHealth]],
        runs: _Runs,
        logger: Any,
        known: Callable[[], Container[str] | None] = lambda: None,
        runtime_limit: int | None = 1000,
        retry_s: float = 5.0,
        prune_s: float = 15.0,
    ) -> None:
        import prometheus_client as prom

        self.read = read
        self.known = known
        self.prune_s = prune_s
        self._pruned_at = time.monotonic()
        self.runs = runs
        self.logger = logger
        self.runtime_limit = runtime_limit
        self.retry_s = retry_s
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
        self._lock = threading.Lock()
        self._term = 0  # the term of leadership the values are for (0: following)
        self._health: dict[str, str] = {}  # schedule id -> its health
        self._decided: set[str] = set()  # decided by the monitor this term
        self._paused: set[str] = set()
        self._shown: dict[str, str] = {}  # schedule id -> the state at 1 in its series
        self._counts = dict.fromkeys(HEALTH_STATES, 0)  # runtime schedules per state
        self._failing: Episode[str] = Episode()
        for state in HEALTH_STATES:
            self.runtime_gauge.labels(state).set(0)

    # -- told by the leader and its monitor ----------------------------------

    def lead(self, leading: bool) -> None:
        """A term begins (read every schedule's health once, on a thread of
        its own) or ends (every gauge to 0)."""
        with self._lock:
            self._term += 1
            term = self._term if leading else 0
            for sid in list(self._shown):
                self._series(sid, None)
            self._health, self._decided, self._paused = {}, set(), set()
            self._counts = dict.fromkeys(HEALTH_STATES, 0)
            for state in HEALTH_STATES:
                self.runtime_gauge.labels(state).set(0)
        if leading:
            threading.Thread(target=self._begin, args=(term,), name="cron-health-metrics", daemon=True).start()

    def decided(self, states: dict[str, str]) -> None:
        """The health the monitor decided this turn."""
        with self._lock:
            self._decided.update(states)
            for sid, state in states.items():
                self._set(sid, health=state)
            if time.monotonic() - self._pruned_at >= self.prune_s:
                self._pruned_at = time.monotonic()
                self._prune()

    def _prune(self) -> None:
        known = self.known()
        if known is None:  # no leader thread here: nothing to tell
            return
        for sid in [sid for sid in self._health.keys() | self._paused if sid not in known]:
            self._set(sid, health="pending", paused=False)  # its counts and series leave together
            before = self._health.pop(sid)
            if ":" in sid:
                self._counts[before] -= 1
                self.runtime_gauge.labels(before).set(self._counts[before])
            self._decided.discard(sid)
            self._series(sid, None)

    def paused(self, schedule_id: str, paused: bool) -> None:
        """A tick of the schedule was decided paused (True), or it fired."""
        with self._lock:
            if paused != (schedule_id in self._paused):
                self._set(schedule_id, paused=paused)

    # -- the read when a term begins -----------------------------------------

    def _begin(self, term: int) -> None:
        while True:
            try:
                healths = self.read()
            except Exception as exc:  # Redis down: the monitor's decisions still show
                if self._failing.failing(type(exc).__name__):
                    self.logger.warning(
                        "Cron health metrics cannot be read (%s).", redact(f"{type(exc).__name__}: {exc}")
                    )
                time.sleep(self.retry_s)
                if self._term != term:
                    return
                continue
            if self._failing.recovered() is not None:
                self.logger.warning("Cron health metrics are read again.")
            break
        with self._lock:
            if self._term != term:
                return
            for schedule in healths:
                sid = schedule.schedule_id
                if sid not in self._decided:
                    self._set(sid, health="pending" if schedule.health == "paused" else schedule.health)
                if schedule.health == "paused":
                    self._set(sid, paused=True)
        for schedule in healths:
            last = schedule.last_run
            if last is not None and last.outcome == "succeeded" and last.finished_ms is not None:
                self.runs.last_success.labels(schedule.schedule_id).set(last.finished_ms / 1000)

    # -- the gauges (under the lock) -----------------------------------------

    def _set(self, sid: str, *, health: str | None = None, paused: bool | None = None) -> None:
        before = self._state(sid)
        if health is not None:
            self._health[sid] = health
        if paused is not None:
            (self._paused.add if paused else self._paused.discard)(sid)
        after = self._state(sid)
        if ":" not in sid:  # declared: always one by one
            self._series(sid, after)
            return
        for state, change in ((before, -1), (after, +1)):
            if state is not None:
                self._counts[state] += change
                self.runtime_gauge.labels(state).set(self._counts[state])
        limit = self.runtime_limit
        if limit is None or sum(self._counts.values()) <= limit:
            self._series(sid, after)
        elif before is None and sum(self._counts.values()) == limit + 1:
            for runtime in [shown for shown in self._shown if ":" in shown]:  # over the limit now: counted only
                self._series(runtime, None)

    def _state(self, sid: str) -> str | None:
        return "paused" if sid in self._paused else self._health.get(sid)

    def _series(self, sid: str, state: str | None) -> None:
        """One schedule's seven series (None: all 0)."""
        if self._shown.get(sid) == state and state is not None:
            return  # unchanged: seven writes saved
        if state is None and sid not in self._shown:
            return
        for each in HEALTH_STATES:
            self.gauge.labels(sid, each).set(1 if each == state else 0)
        if state is None:
            del self._shown[sid]
        else:
            self._shown[sid] = state


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
        self._guard(self._tick_decided, schedule_id, outcome)

    def _tick_decided(self, schedule_id: str, outcome: str) -> None:
        self.ticks.labels(schedule_id, outcome).inc()
        if self._health is not None and outcome == "paused":
            self._health.paused(schedule_id, True)

    def enqueued(self, *, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        """Observe the fire lag and stamp the schedule's last fire."""
        self._guard(self._enqueued, schedule_id, tick_ms, lag_ms)

    def _enqueued(self, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        self.lag.labels(schedule_id).observe(max(lag_ms, 0) / 1000)
        self.last_fire.labels(schedule_id).set((tick_ms + max(lag_ms, 0)) / 1000)
        if self._health is not None:
            self._health.paused(schedule_id, False)

    def health_decided(self, states: dict[str, str]) -> None:
        """The health the leader's run monitor decided in a turn."""
        if self._health is not None:
            self._guard(self._health.decided, states)

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
