"""The one read of every schedule's health, for operators: ``dramatiq-cron
status``, ``check`` and ``list``, the dashboard's overview, health filter and
``/health`` all count and show what :func:`read_health` decides; and a
schedule's runs.

The health is the leader's decision (stored under its fenced lease), with
one fact checked here from the ledger so that it holds without any leader:
a tick more than ``grace`` overdue that nobody decided, or that was
recorded as missed, makes the schedule ``missed``.  A check run from
outside (a Kubernetes probe, Nagios, a system cron) is thereby a dead-man's
switch for the whole scheduler.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from dramatiq import Broker

from ..errors import CronConfigurationError, CronScheduleError
from ..schedules.schedule import NEVER, BoundSchedule
from ..store.codes import ClaimResult, parse_ledger_value, whole_actor
from ..store.connection import Connections
from ..store.health_reads import HealthReads
from ..store.keys import Keys
from ..store.runtime import StoredProblem
from .health import Facts, Policy
from .records import PROBLEMS, ScheduleHealth, parse_run

__all__ = ["CheckReport", "HealthApp", "check_report", "decide_check", "every_schedule", "read_health"]

#: Schedules whose health is read per round trip.
CHUNK = 1000

PolicyOf = Callable[[BoundSchedule], Policy]


class HealthApp(Protocol):
    """What the operators' reads need of the app's ``CronMiddleware``."""

    @property
    def keys(self) -> Keys: ...

    @property
    def lock_ttl(self) -> int: ...

    @property
    def prefix(self) -> str: ...

    @property
    def runtime(self) -> Any: ...

    def all_schedules(self) -> list[BoundSchedule]: ...

    def health_policy(self, schedule: BoundSchedule) -> Policy: ...

    def connections(self, broker: Broker) -> Connections: ...


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """Every schedule's health, and the verdict for a probe."""

    schedules: list[ScheduleHealth]
    now_ms: int
    #: Stored runtime definitions this version cannot read, or reads
    #: differently from how they were written.
    stored: list[StoredProblem] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """The Nagios status: 0 when every schedule is ``ok``, ``pending``
        or ``paused``; 1 when one is ``late`` or ``running_long``, or a
        stored definition reads differently now; 2 when one is ``failing``
        or ``missed``, or a stored definition cannot be read (it does not
        fire)."""
        health = max((PROBLEMS.get(s.health, 0) for s in self.schedules), default=0)
        return max(health, max((_STORED_PROBLEMS[p.kind] for p in self.stored), default=0))

    def counts(self) -> dict[str, int]:
        """How many schedules are in each health, problems first."""
        out: dict[str, int] = {}
        for s in sorted(self.schedules, key=lambda s: -PROBLEMS.get(s.health, 0)):
            out[s.health] = out.get(s.health, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        """``{"schedules": [{"id", "actor", "name", "health", "since",
        "last_run"}, ...]}``, the document of ``check --json``."""
        return {"schedules": [s.to_json() for s in self.schedules], "stored": [p.to_json() for p in self.stored]}


# The Nagios status of a stored definition's problem.
_STORED_PROBLEMS = {"unreadable": 2, "changed": 1}


def runtime_of(cron: HealthApp) -> Any:
    """The app's runtime schedules, or None (a StubBroker without Redis)."""
    try:
        return cron.runtime
    except CronConfigurationError:
        return None


def every_schedule(declared: Iterable[BoundSchedule], runtime: Any) -> tuple[list[BoundSchedule], list[StoredProblem]]:
    """The declared schedules, then every runtime one in id order, and the
    stored runtime definitions read differently now or not at all: one read
    of every definition, each bound once (``RuntimeSchedules.survey``;
    ``runtime`` None: none)."""
    schedules, stored = ([], []) if runtime is None else runtime.survey()
    return [*declared, *schedules], stored


def check_report(cron: HealthApp, broker: Broker) -> CheckReport:
    """Every schedule's health (declared and runtime) and the stored
    definitions that read differently, read from the Redis ``cron`` uses.

    Raises:
      redis.ConnectionError, redis.TimeoutError: Redis did not answer.
    """
    reads = HealthReads(cron.connections(broker).operator(), cron.keys)
    now = reads.server_ms()  # first: an unreachable Redis fails here
    schedules, stored = every_schedule(cron.all_schedules(), runtime_of(cron))
    return read_health(reads, schedules, now_ms=now, policy=cron.health_policy, stored=stored)


def read_health(
    reads: HealthReads,
    schedules: Iterable[BoundSchedule],
    *,
    now_ms: int,
    policy: PolicyOf,
    stored: Sequence[StoredProblem] = (),
) -> CheckReport:
    """The health of ``schedules`` at ``now_ms``, read :data:`CHUNK` at a
    time however many there are; ``policy(schedule)`` gives each one's
    :class:`Policy`; ``stored``: the report's stored problems."""
    out: list[ScheduleHealth] = []
    paused = reads.pauses(now_ms)
    it = iter(schedules)
    while chunk := list(itertools.islice(it, CHUNK)):
        for s, (facts, entry, run) in zip(chunk, reads.rows([s.id for s in chunk]), strict=True):
            is_paused = s.id in paused or whole_actor(s.actor_name) in paused
            health, since = decide_check(
                s, Facts.loads(facts), entry, now_ms=now_ms, policy=policy(s), paused=is_paused
            )
            out.append(
                ScheduleHealth(
                    schedule_id=s.id,
                    actor=s.actor_name,
                    name=s.name if s.named else None,
                    health=health,
                    since_ms=since,
                    last_run=parse_run(s.id, run),
                    registered=entry is not None,
                )
            )
    return CheckReport(schedules=out, now_ms=now_ms, stored=list(stored))


def decide_check(
    schedule: BoundSchedule, facts: Facts, ledger_value: object, *, now_ms: int, policy: Policy, paused: bool
) -> tuple[str, int | None]:
    """A schedule's health and since when, as ``check`` reports it: paused
    first; then, unless the leader's stored health is already ``failing``,
    ``missed`` when the ledger shows a tick more than ``grace`` overdue
    (never decided, or recorded as missed), or when the ledger has no entry
    at all while a tick of the schedule is more than ``grace`` past (no
    process ever registered it: no worker runs, every process has
    ``lead=False``, or Redis came back empty); else the stored health."""
    if paused:
        return "paused", None
    if facts.health == "failing":
        return facts.health, facts.since_ms
    entry = parse_ledger_value(ledger_value) if ledger_value is not None else None
    if entry is None:
        due = _last_tick_before(schedule, now_ms - policy.grace_ms)
        if due is not None:
            return "missed", facts.since_ms if facts.health == "missed" else due + policy.grace_ms
        return facts.health, facts.since_ms
    if entry.result == ClaimResult.RECORDED and not entry.baseline:
        return "missed", facts.since_ms if facts.health == "missed" else entry.tick_ms
    due = schedule.next_after(entry.tick_ms)
    if due < NEVER and now_ms > due + policy.grace_ms:
        return "missed", due + policy.grace_ms
    return facts.health, facts.since_ms


def _last_tick_before(schedule: BoundSchedule, instant_ms: int) -> int | None:
    """The schedule's last tick before ``instant_ms``, None when it has none
    (it starts later, or a one-shot's instant is still ahead)."""
    try:
        return schedule.last_before(instant_ms)
    except CronScheduleError:
        return None
