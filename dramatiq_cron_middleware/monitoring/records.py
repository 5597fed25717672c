"""The values of run monitoring: a run's record, a schedule's health, an
alert; and their JSON forms, the ones ``dramatiq-cron runs --json``,
``dramatiq-cron check --json``, the webhook and the dashboard show."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from ..times import iso

__all__ = ["HEALTH_STATES", "PROBLEMS", "RUN_OUTCOMES", "Alert", "RunRecord", "ScheduleHealth", "parse_run"]

#: What became of a cron message: open (``pending``: enqueued, not started;
#: ``running``: started, not finished) or finished.  ``retrying``: this
#: attempt failed and dramatiq retries it; ``dropped``: skipped (``AgeLimit``)
#: or a duplicate; ``lost``: it started, went past ``max_runtime`` and its
#: worker never reported (see docs/monitoring.md).
RUN_OUTCOMES = ("pending", "running", "succeeded", "failed", "retrying", "dropped", "lost")

#: A schedule's health (see docs/monitoring.md for how each is decided).
HEALTH_STATES = ("pending", "ok", "late", "running_long", "failing", "missed", "paused")

#: The health states that alert when entered, each with its Nagios status
#: (1 warning, 2 critical).
PROBLEMS = {"late": 1, "running_long": 1, "failing": 2, "missed": 2}


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run of a schedule: the message of one tick (its latest attempt).

    Times are epoch milliseconds (Redis time for start and finish).
    """

    schedule_id: str
    tick_ms: int
    outcome: str
    attempt: int
    started_ms: int | None
    finished_ms: int | None
    duration_ms: int | None
    host: str | None
    pid: int | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """``tick`` (ISO 8601), ``outcome``, ``started``, ``finished``,
        ``duration_ms``, ``attempt``, ``host``, ``pid``, ``error``."""
        return {
            "tick": iso(self.tick_ms),
            "outcome": self.outcome,
            "started": _iso_or_none(self.started_ms),
            "finished": _iso_or_none(self.finished_ms),
            "duration_ms": self.duration_ms,
            "attempt": self.attempt,
            "host": self.host,
            "pid": self.pid,
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True)
class ScheduleHealth:
    """A schedule's health, and since when (None: never decided)."""

    schedule_id: str
    actor: str
    #: The schedule's ``name=``; None for an actor's unnamed schedule (as
    #: ``dramatiq-cron list`` shows it).
    name: str | None
    health: str
    since_ms: int | None
    last_run: RunRecord | None
    #: Whether the tick ledger has an entry of the schedule (False: no
    #: process ever registered it; ``check`` says so).
    registered: bool = True

    def to_json(self) -> dict[str, Any]:
        """``id``, ``actor``, ``name``, ``health``, ``since`` (ISO 8601 or
        null), ``last_run`` (a run's JSON or null)."""
        return {
            "id": self.schedule_id,
            "actor": self.actor,
            "name": self.name,
            "health": self.health,
            "since": _iso_or_none(self.since_ms),
            "last_run": None if self.last_run is None else self.last_run.to_json(),
        }


@dataclasses.dataclass(frozen=True)
class Alert:
    """A change of a schedule's health worth telling someone: into
    ``late``, ``running_long``, ``failing`` or ``missed``, or back to ``ok``
    from one of them."""

    schedule_id: str
    actor: str
    #: As :attr:`ScheduleHealth.name`: None for an unnamed schedule.
    name: str | None
    state: str
    previous: str
    tick_ms: int | None
    at_ms: int
    error: str | None

    @property
    def id(self) -> str:
        """The alert's identity: 32 hex digits derived from its content, the
        same in every process and on every retry (the webhook's
        ``Idempotency-Key``), different for every alert."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:32]

    def to_json(self) -> dict[str, Any]:
        """The webhook's body: ``id`` (:attr:`id`), ``schedule``, ``actor``,
        ``name`` (null for an unnamed schedule), ``state``, ``previous``,
        ``tick`` (ISO 8601 or null), ``at`` (ISO 8601), ``error`` (string or
        null)."""
        stored = self._stored()
        return {"id": self.id, **stored, "tick": _iso_or_none(self.tick_ms), "at": iso(self.at_ms)}

    def dumps(self) -> str:
        """The stored form (the alert outbox): JSON with epoch ms."""
        return json.dumps(self._stored())

    def _stored(self) -> dict[str, Any]:
        return {key: getattr(self, field) for field, key in _ALERT_KEYS.items()}

    @classmethod
    def loads(cls, text: str) -> Alert:
        """Read :meth:`dumps`'s form back."""
        data = json.loads(text)
        texts = {field: str(data[key]) for field, key in _ALERT_KEYS.items() if field in _ALERT_TEXTS}
        name = data.get("name")
        return cls(
            **texts,
            name=None if name is None else str(name),
            tick_ms=_int_or_none(data.get("tick")),
            at_ms=int(data["at"]),
            error=data.get("error"),
        )


# An alert's fields and their keys, in the order of its stored form (its id
# is the digest of that form: the order is part of it).
_ALERT_KEYS = {
    "schedule_id": "schedule",
    "actor": "actor",
    "name": "name",
    "state": "state",
    "previous": "previous",
    "tick_ms": "tick",
    "at_ms": "at",
    "error": "error",
}
_ALERT_TEXTS = ("schedule_id", "actor", "state", "previous")


def _iso_or_none(ms: int | None) -> str | None:
    return None if ms is None else iso(ms)


def parse_run(schedule_id: str, text: str | bytes | None) -> RunRecord | None:
    """A stored run record (JSON written by the run scripts), or None when
    missing or unusable (a stray write is skipped, never fatal)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
        tick = int(data["tick"])
        started = _int_or_none(data.get("started"))
        finished = _int_or_none(data.get("finished"))
        outcome = str(data["outcome"])
    except (ValueError, TypeError, KeyError):
        return None
    if outcome not in RUN_OUTCOMES:
        return None
    duration = finished - started if started is not None and finished is not None else None
    error = data.get("error")
    host = data.get("host")
    return RunRecord(
        schedule_id=schedule_id,
        tick_ms=tick,
        outcome=outcome,
        attempt=int(data.get("attempt") or 1),
        started_ms=started,
        finished_ms=finished,
        duration_ms=duration,
        host=host if isinstance(host, str) else None,
        pid=_int_or_none(data.get("pid")),
        error=error if isinstance(error, str) else None,
    )


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None
