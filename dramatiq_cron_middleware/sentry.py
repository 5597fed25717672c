"""Sentry Crons check-ins for cron messages (the ``sentry`` extra).

Add :class:`SentryCrons` to the broker beside the
:class:`~dramatiq_cron_middleware.CronMiddleware` and initialise
``sentry_sdk`` as usual.  The middleware's run recorder tells it every
attempt of a cron message (on a thread of its own, so a slow Sentry holds
back neither the job nor the run records); each is one check-in of its
schedule's monitor: ``in_progress`` when a worker starts it, then ``ok`` or
``error`` with its duration.  Sentry derives ``missed`` (no check-in within
the margin) and ``timeout`` (no finish within ``max_runtime``) itself.

A failed attempt that dramatiq will retry is an ``error`` check-in, and the
retry is a new check-in (Sentry's Celery integration reports a retry the
same way): the monitor shows every failed attempt, and its
``failure_issue_threshold`` counts them.  A message that ``AgeLimit`` skips
before it starts (its ``max_age``) sends nothing, so Sentry sees the tick
as missed, which it was; a duplicate that ``CronDeduplication`` skips sends
no finish (the run it duplicates, whose check-in id it shares, closes it).

Each monitor's configuration (upserted by Sentry with every ``in_progress``
check-in) comes from the schedule; see :func:`monitor_config` and
:func:`monitor_slug`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import threading
import time
import uuid
from typing import Any

from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger

from .errors import CronConfigurationError
from .leader.reports import Episode
from .middleware import CronMiddleware, find_middleware
from .monitoring.recorder import Run
from .schedules.ids import parse_id, split_runtime_id
from .schedules.schedule import BoundSchedule
from .store.connection import redact

__all__ = ["SentryCrons", "monitor_config", "monitor_slug"]

# Sentry's longest monitor slug.
_SLUG_LENGTH = 50
_SLUG_UNSAFE = re.compile(r"[^a-z0-9_]+")
# Check-in ids derive from the message id and the attempt, so every process
# that runs an attempt names the same check-in.
_CHECK_IN_IDS = uuid.UUID("8d1c5a8e-6f0b-4c39-9a55-2b1f6a0c7e42")
# How long a runtime schedule's definition (read from Redis) is used before
# it is read again, and how long a failed read is not retried.
_RUNTIME_FRESH_S = 300.0
_RUNTIME_RETRY_S = 60.0
_RUNTIME_CACHE = 10_000
_INTERVAL_UNITS = (("week", 604_800_000), ("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000))


def monitor_slug(schedule_id: str) -> str:
    """The Sentry monitor slug of a schedule: stable (it depends on the
    schedule id only) and distinct for distinct ids.

    An id that is already a valid slug (lower-case letters, digits, ``_``
    and ``-``, at most 50 characters; an actor's one unnamed schedule such
    as ``send_report``) is its own slug.  Any other (``send_report/nightly``,
    ``send_report:tenant-42``, upper case, too long) is lower-cased, each run
    of other characters becomes ``-``, and the first eight hex digits of the
    id's SHA-1 are appended: ``send_report-nightly-1b0f3c2a``.
    """
    readable = _SLUG_UNSAFE.sub("-", schedule_id.lower()).strip("-")
    if readable == schedule_id and len(readable) <= _SLUG_LENGTH:
        return readable
    digest = hashlib.sha1(schedule_id.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{readable[: _SLUG_LENGTH - 9].rstrip('-')}-{digest}".lstrip("-")


def monitor_config(
    schedule: BoundSchedule,
    *,
    grace: int | None = None,
    max_runtime: int | None = None,
    failure_threshold: int | None = None,
) -> dict[str, Any]:
    """The Sentry monitor configuration of ``schedule``.

    - ``schedule``: the cron expression as a ``crontab``; a six-field
      expression loses its seconds field (Sentry counts in minutes: it then
      expects a check-in in every minute the schedule ticks in).  An
      interval schedule is an ``interval`` in the largest of week, day,
      hour, minute that divides it, else in whole minutes rounded up.
    - ``timezone``: the schedule's zone.
    - ``checkin_margin`` from ``grace`` and ``max_runtime`` from
      ``max_runtime``, both in minutes rounded up (at least 1, Sentry's
      minimum); ``failure_issue_threshold`` from ``failure_threshold``, and
      ``recovery_threshold`` 1 (one success is recovery, as for the
      schedule's health).  Each is left out when None (Sentry's default).

    Parameters:
      schedule: The bound schedule.
      grace(int): Milliseconds.  Defaults to None.
      max_runtime(int): Milliseconds.  Defaults to None.
      failure_threshold(int): Runs.  Defaults to None.
    """
    config: dict[str, Any] = {"schedule": _sentry_schedule(schedule), "timezone": schedule.timezone}
    if grace is not None:
        config["checkin_margin"] = _minutes(grace)
    if max_runtime is not None:
        config["max_runtime"] = _minutes(max_runtime)
    if failure_threshold is not None:
        config["failure_issue_threshold"] = failure_threshold
    config["recovery_threshold"] = 1
    return config


def _sentry_schedule(schedule: BoundSchedule) -> dict[str, Any]:
    if schedule.every is not None:
        for unit, ms in _INTERVAL_UNITS:
            if schedule.every % ms == 0:
                return {"type": "interval", "value": schedule.every // ms, "unit": unit}
        return {"type": "interval", "value": _minutes(schedule.every), "unit": "minute"}
    fields = schedule.expression.split()
    return {"type": "crontab", "value": " ".join(fields[1:] if schedule.has_seconds else fields)}


def _minutes(ms: int) -> int:
    return max(1, math.ceil(ms / 60_000))


class SentryCrons(Middleware):
    """Sends a Sentry Crons check-in for every attempt of a cron message:
    ``in_progress`` at its start, ``ok`` or ``error`` with its duration at
    its finish, to one monitor per schedule (:func:`monitor_slug`),
    configured from the schedule (:func:`monitor_config`).

    Other messages cost nothing, and nothing is sent while ``sentry_sdk``
    is not initialised.  Sending never fails a message: an error is logged
    once per episode.

    Parameters:
      runtime(bool): Whether runtime schedules (``CronMiddleware.add``) get
        monitors too; their definitions are read from Redis, at most once
        per schedule every five minutes in each process.  Sentry bills per
        monitor: turn it off when you keep thousands.  Defaults to True.

    Raises:
      CronConfigurationError: when sentry-sdk is not installed.
    """

    #: As a sink of the run recorder (see :meth:`before_worker_boot`).
    name = "sentry"

    def __init__(self, *, runtime: bool = True) -> None:
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        if importlib.util.find_spec("sentry_sdk") is None:
            raise CronConfigurationError("SentryCrons needs sentry-sdk: pip install 'dramatiq-cron-middleware[sentry]'")
        self.runtime = runtime
        self._broker: Broker | None = None
        self._cron: CronMiddleware | None = None
        self._declared: dict[str, dict[str, Any]] = {}  # schedule id -> monitor config
        # runtime schedule id -> (monotonic expiry, (monitored, monitor config))
        self._runtime: dict[str, tuple[float, tuple[bool, dict[str, Any] | None]]] = {}
        self._lock = threading.Lock()
        self._failing: Episode[str] = Episode()  # sending check-ins
        self._unread: Episode[str] = Episode()  # reading runtime definitions
        self._read_again_at = 0.0  # monotonic; after a failed read, none before this

    def before_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Be told every cron run of this process by the ``CronMiddleware``'s
        run recorder (:meth:`started`, :meth:`finished`), on a thread of its
        own: a slow Sentry or Redis holds back neither the job nor the
        other sinks."""
        self._broker = broker
        find_middleware(broker, needed_by="SentryCrons").run_recorder(broker).add(self)

    def started(self, run: Run) -> None:
        """Check in ``in_progress`` (with the monitor's configuration)."""
        self._send(run, "in_progress")

    def finished(self, run: Run) -> None:
        """Check in ``ok`` or ``error`` with the attempt's duration; a
        message skipped (never run, or a duplicate whose run closes its
        check-in) sends nothing."""
        if run.outcome != "dropped" and run.duration_s is not None:
            self._send(run, "ok" if run.outcome == "succeeded" else "error")

    def _send(self, run: Run, status: str) -> None:
        if self._broker is None or not _sentry_active():
            return
        try:
            monitored, config = self._config(self._broker, run.schedule_id)
            if not monitored:
                return
            from sentry_sdk.crons import capture_checkin

            capture_checkin(
                monitor_slug=monitor_slug(run.schedule_id),
                check_in_id=uuid.uuid5(_CHECK_IN_IDS, f"{run.message_id}|{run.attempt - 1}").hex,
                status=status,
                duration=None if status == "in_progress" else run.duration_s,
                monitor_config=config if status == "in_progress" else None,  # type: ignore[arg-type]
            )
        except Exception as exc:  # never fail the message for its monitoring
            self._report(exc)
            return
        if self._failing.recovered() is not None:
            self.logger.warning("Sentry Crons check-ins are sent again.")

    def _config(self, broker: Broker, schedule_id: str) -> tuple[bool, dict[str, Any] | None]:
        """Whether ``schedule_id`` is monitored (not a runtime one with
        ``runtime=False``, nor one that no longer exists), and its monitor
        configuration (None when its definition cannot be read now: the
        check-in then goes without, and Sentry keeps the stored one)."""
        cron = self._cron
        if cron is None:
            cron = self._cron = find_middleware(broker, needed_by="SentryCrons")
        if parse_id(schedule_id).runtime:
            return self._runtime_config(cron, schedule_id) if self.runtime else (False, None)
        config = self._declared.get(schedule_id)
        if config is None:  # actors may be declared after the first message
            self._declared = {s.id: _config_of(s, cron) for s in cron.all_schedules()}
            config = self._declared.get(schedule_id)
        return config is not None, config

    def _runtime_config(self, cron: CronMiddleware, schedule_id: str) -> tuple[bool, dict[str, Any] | None]:
        now = time.monotonic()
        with self._lock:
            cached = self._runtime.get(schedule_id)
        if cached is not None and now < cached[0]:
            return cached[1]
        if now < self._read_again_at:  # Redis failed a moment ago: no wait for its timeout at every start
            return cached[1] if cached is not None else (True, None)
        actor, name = split_runtime_id(schedule_id)
        try:
            found = cron.runtime.get(actor, name)
        except Exception as exc:  # Redis down: the last answer, or none; ask again later
            self._read_again_at = now + _RUNTIME_RETRY_S
            if self._unread.failing(type(exc).__name__):
                self.logger.warning(
                    "Cannot read runtime schedules for their Sentry monitors (%s); their check-ins go without a "
                    "monitor configuration until it can be read.",
                    redact(f"{type(exc).__name__}: {exc}"),
                )
            answer = cached[1] if cached is not None else (True, None)
            expiry = now + _RUNTIME_RETRY_S
        else:
            if self._unread.recovered() is not None:
                self.logger.warning("Runtime schedules are read again for their Sentry monitors.")
            answer = (found is not None, None if found is None else _config_of(found.schedule, cron))
            expiry = now + _RUNTIME_FRESH_S
        with self._lock:
            if len(self._runtime) >= _RUNTIME_CACHE:
                self._runtime.clear()  # bounded memory whatever the number of runtime schedules
            self._runtime[schedule_id] = (expiry, answer)
        return answer

    def _report(self, exc: Exception) -> None:
        if self._failing.failing(type(exc).__name__):
            self.logger.warning(
                "Sentry Crons check-in not sent (%s); further failures are not logged until one is sent.",
                redact(f"{type(exc).__name__}: {exc}"),
            )


def _sentry_active() -> bool:
    import sentry_sdk

    return bool(sentry_sdk.get_client().is_active())


def _config_of(schedule: BoundSchedule, cron: CronMiddleware) -> dict[str, Any]:
    policy = cron.health_policy(schedule)  # the thresholds run monitoring uses, resolved
    return monitor_config(
        schedule,
        grace=policy.grace_ms,
        max_runtime=policy.max_runtime_ms,
        failure_threshold=policy.failure_threshold,
    )
