"""The scheduler's status, decided once for every surface: ``dramatiq-cron
status`` and ``check`` and the dashboard's overview and ``/health`` render
the :class:`Status` that :func:`read_status` returns, so they cannot tell
an operator different things about the same state.

One rule set: who leads and whether the lease is renewed; the candidates
and the processes that may not lead, listed for three leases and counted
as live for two; the schedule sets the live candidates declare; the
replicas and the eviction policy; the pauses; and every schedule's health,
the runtime ones included however many there are (read a page at a time,
never capped).  Each finding worth an operator's attention is a
:class:`Problem`, with the Nagios status it gives ``check``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from .leader.candidates import SEMANTICS_ID
from .monitoring.health import Policy
from .monitoring.read import CheckReport, HealthApp, every_schedule, read_health
from .monitoring.records import HEALTH_STATES, PROBLEMS, ScheduleHealth
from .schedules.schedule import NEVER, BoundSchedule
from .store.collector import collector_paused
from .store.health_reads import HealthReads
from .store.runtime_definition import StoredProblem
from .store.timing import Timing
from .targets import paused_by
from .times import iso, span

__all__ = [
    "Health",
    "Problem",
    "ScheduleSet",
    "Status",
    "StatusReads",
    "pause_end",
    "read_every_health",
    "read_status",
    "status_sets_json",
    "upcoming",
]

#: Descriptions ``status`` prints at most (declared schedules first).
DESCRIBED = 1000


class StatusReads(Protocol):
    """The scheduler's state that the status reads (the store's operator reads)."""

    def server_ms(self) -> int: ...

    def round_trip_ms(self) -> float: ...

    def leader(self) -> Any: ...

    def candidates(self, *, since_ms: int) -> list[Any]: ...

    def ineligible(self, *, since_ms: int) -> list[Any]: ...

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]: ...

    def replicas_lacking(self) -> Any: ...

    def maxmemory_policy(self) -> str | None: ...

    def pauses(self) -> dict[str, int | None]: ...


@dataclasses.dataclass(frozen=True)
class Problem:
    """A finding worth an operator's attention: ``kind`` names it (stable,
    for JSON), ``text`` says it in one sentence, ``details`` add lines."""

    kind: str
    text: str
    details: tuple[str, ...] = ()
    #: The Nagios status it gives ``check`` (1 warning); 0: it is shown by
    #: ``status`` and the overview only.
    level: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ScheduleSet:
    """The schedule set a group of live candidates declares."""

    fingerprint: str
    processes: int
    versions: list[str]
    leader: bool
    schedules: list[str]
    semantics: str | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Health:
    """Every schedule's health, with the schedules themselves (by id, in
    the order read: declared ones first)."""

    report: CheckReport
    schedules: dict[str, BoundSchedule]

    def problems(self) -> list[ScheduleHealth]:
        """The schedules in ``late``, ``running_long``, ``failing`` or
        ``missed``: the critical ones first, then the longest in trouble."""
        found = [s for s in self.report.schedules if s.health in PROBLEMS]
        return sorted(found, key=lambda s: (-PROBLEMS[s.health], s.since_ms or 0, s.schedule_id))

    def matching(self, health: str) -> list[ScheduleHealth]:
        """The schedules the health filter ``health`` keeps, problems first."""
        if health == "problems":
            return self.problems()
        if health not in HEALTH_STATES:
            return list(self.report.schedules)
        return [s for s in self.report.schedules if s.health == health]

    def counts(self) -> list[tuple[str, int]]:
        """``(health, how many)`` for every health some schedule has, the
        problems first (critical, then warning), then the others in
        ``HEALTH_STATES`` order."""
        counts = self.report.counts()
        order = sorted(HEALTH_STATES, key=lambda h: (-PROBLEMS.get(h, 0), HEALTH_STATES.index(h)))
        return [(h, counts[h]) for h in order if counts.get(h)]

    def summary(self) -> str:
        """In words: ``"2 failing, 1 late"``, or ``"no problems"``."""
        problems = [f"{n} {h.replace('_', ' ')}" for h, n in self.counts() if h in PROBLEMS]
        return ", ".join(problems) or "no problems"

    def runtime(self) -> list[BoundSchedule]:
        """The runtime schedules, in the order read."""
        return [s for s in self.schedules.values() if s.source == "runtime"]


def upcoming(schedule: BoundSchedule, now_ms: int, count: int = 3) -> list[int]:
    """The next ``count`` ticks after ``now_ms`` (fewer past the schedule's end)."""
    out, tick = [], now_ms
    for _ in range(count):
        tick = schedule.next_after(tick)
        if tick >= NEVER:
            break
        out.append(tick)
    return out


def pause_end(schedule: BoundSchedule, pauses: Mapping[str, int | None]) -> int | None:
    """When the pause that stops ``schedule`` ends by itself (None: it runs,
    or it is paused until resumed)."""
    blocker = paused_by(schedule, pauses)
    return None if blocker is None else pauses.get(blocker.member)


def read_every_health(
    reads: HealthReads,
    schedules: Iterable[BoundSchedule],
    *,
    now_ms: int,
    policy: Callable[[BoundSchedule], Policy],
    stored: Sequence[StoredProblem] = (),
) -> Health:
    """The health of every one of ``schedules`` (see ``monitoring.read``),
    ``stored`` the report's stored problems."""
    kept: dict[str, BoundSchedule] = {}

    def keeping() -> Iterable[BoundSchedule]:
        for schedule in schedules:
            kept[schedule.id] = schedule
            yield schedule

    with collector_paused():  # (many objects, no cyclic garbage)
        report = read_health(reads, keeping(), now_ms=now_ms, policy=policy, stored=stored)
    return Health(report=report, schedules=kept)


@dataclasses.dataclass(frozen=True)
class Status:
    """The scheduler as an operator sees it, at the server's ``now_ms``."""

    where: str
    now_ms: int
    round_trip_ms: float
    #: The lease as Redis holds it (``store.operator.LeaderInfo``), None: free.
    leader: Any
    #: The lease length the windows below are counted in.
    lease_ms: int
    #: Whether a leader renewed the lease within its length.
    healthy: bool
    #: Candidates seen in the last ``listed_ms``, newest first.
    candidates: list[Any]
    #: Processes that may not lead (``lead=False``), likewise.
    ineligible: list[Any]
    #: The schedule sets of the live candidates, when they differ.
    schedule_sets: list[ScheduleSet]
    replicas_lacking: Any
    maxmemory_policy: str | None
    #: The live pauses: member -> when it ends (None: until resumed).
    pauses: dict[str, int | None]
    #: Declared schedules; runtime ones per actor; actors of those not declared.
    declared: int
    runtime_by_actor: dict[str, int]
    undeclared: dict[str, int]
    #: Schedule id -> description (at most :data:`DESCRIBED`).
    descriptions: dict[str, str]
    health: Health
    problems: list[Problem]

    @property
    def listed_ms(self) -> int:
        return Timing.for_lease(self.lease_ms).candidate_listed_ms

    @property
    def live_ms(self) -> int:
        return Timing.for_lease(self.lease_ms).candidate_live_ms

    @property
    def runtime_total(self) -> int:
        return sum(self.runtime_by_actor.values())

    @property
    def no_eligible_process(self) -> bool:
        return any(p.kind == "no_eligible_process" for p in self.problems)

    @property
    def check_level(self) -> int:
        """The Nagios status the problems give ``check`` (besides health)."""
        return max((p.level for p in self.problems), default=0)

    def is_leader(self, candidate: Any) -> bool:
        """Whether this candidate holds the lease."""
        return self.leader is not None and candidate.candidate_id == _candidate_id(self.leader)

    def to_json(self) -> dict[str, Any]:
        """The document of ``status --json``."""
        s = self
        leader, lacking = s.leader, s.replicas_lacking
        return {
            "redis": {"url": s.where, "reachable": True, "round_trip_ms": round(s.round_trip_ms, 2)},
            "now": iso(s.now_ms),
            "healthy": s.healthy,
            "leader": None
            if leader is None
            else {
                "host": leader.host,
                "pid": leader.pid,
                "epoch": leader.epoch,
                "since": iso(leader.since_ms),
                "renewed": iso(leader.renewed_ms),
                "lease_ms": leader.ttl_ms,
                "remaining_ms": leader.remaining_ms,
            },
            "candidates": [
                {
                    "host": c.host,
                    "pid": c.pid,
                    "candidate": c.candidate_id,
                    "last_seen": iso(c.seen_ms),
                    "leader": s.is_leader(c),
                    "fingerprint": c.fingerprint,
                    "version": c.version,
                }
                for c in s.candidates
            ],
            "not_eligible": [
                {"host": c.host, "pid": c.pid, "candidate": c.candidate_id, "last_seen": iso(c.seen_ms)}
                for c in s.ineligible
            ],
            "no_eligible_process": s.no_eligible_process,
            **status_sets_json(s),
            "runtime": {"total": s.runtime_total, "by_actor": s.runtime_by_actor, "undeclared": s.undeclared},
            "descriptions": s.descriptions,
            "health": s.health.report.counts(),
            "replicas_lacking": None
            if lacking is None
            else {
                "host": lacking.host,
                "pid": lacking.pid,
                "acked": lacking.acked,
                "required": lacking.required,
                "sentinels": lacking.sentinels,
                "since": iso(lacking.since_ms),
            },
            "paused": {member: None if until is None else iso(until) for member, until in sorted(s.pauses.items())},
            "maxmemory_policy": s.maxmemory_policy,
            "problems": [p.to_json() for p in s.problems],
        }

    def show(self, attribute: str) -> bool:
        """Whether any candidate has a ``fingerprint`` or ``version``."""
        return any(getattr(c, attribute, "") for c in self.candidates)


def read_status(
    reads: StatusReads,
    health_reads: HealthReads,
    cron: HealthApp,
    *,
    runtime: Any,
    declares: Callable[[str], bool],
    where: str,
    health: Health | None = None,
) -> Status:
    """The status now.  ``runtime`` is the app's runtime schedules (None:
    none), ``declares(actor)`` whether the app declares an actor, ``health``
    a read of every schedule's health to use (the dashboard's kept one);
    without it every schedule's health is read now.

    Raises:
      redis.ConnectionError, redis.TimeoutError: Redis did not answer.
    """
    round_trip = reads.round_trip_ms()
    now = reads.server_ms()
    leader = reads.leader()
    lease = leader.ttl_ms if leader else cron.lock_ttl
    timing = Timing.for_lease(lease)
    candidates = reads.candidates(since_ms=now - timing.candidate_listed_ms)
    ineligible = reads.ineligible(since_ms=now - timing.candidate_listed_ms)
    live = [c for c in candidates if now - c.seen_ms <= timing.candidate_live_ms]
    sets = _schedule_sets(reads, live, leader)
    declared = cron.all_schedules()
    if health is None:
        schedules, stored = every_schedule(declared, runtime)
        health = read_every_health(health_reads, schedules, now_ms=now, policy=cron.health_policy, stored=stored)
    by_actor = collections.Counter(s.actor_name for s in health.runtime())
    status = Status(
        where=where,
        now_ms=now,
        round_trip_ms=round_trip,
        leader=leader,
        lease_ms=lease,
        healthy=leader is not None and now - leader.renewed_ms <= leader.ttl_ms,
        candidates=candidates,
        ineligible=ineligible,
        schedule_sets=sets,
        replicas_lacking=reads.replicas_lacking(),
        maxmemory_policy=reads.maxmemory_policy(),
        pauses=reads.pauses(),
        declared=len(declared),
        runtime_by_actor=dict(sorted(by_actor.items())),
        undeclared={a: n for a, n in sorted(by_actor.items()) if not declares(a)},
        descriptions=dict(
            itertools.islice(((s.id, s.description) for s in health.schedules.values() if s.description), DESCRIBED)
        ),
        health=health,
        problems=[],
    )
    return dataclasses.replace(status, problems=_problems(status, live, cron.prefix))


def status_sets_json(status: Status) -> dict[str, Any]:
    """The schedule sets in ``check --json`` and ``/health``."""
    return {
        "mixed_schedule_sets": bool(status.schedule_sets),
        "schedule_sets": [e.to_json() for e in status.schedule_sets],
    }


def _problems(status: Status, live: Sequence[Any], prefix: str) -> list[Problem]:
    """The one rule set of what is wrong, most serious first."""
    out = []
    if status.leader is None:
        out.append(Problem("no_leader", "No process holds the lease: no tick fires until one does."))
    elif not status.healthy:
        out.append(Problem("stale_lease", "The leader has not renewed its lease within its length."))
    if status.ineligible and not live:
        out.append(
            Problem(
                "no_eligible_process",
                f"No process eligible to lead was seen in the last {span(status.live_ms)}: every live process "
                "runs with lead=False (or DRAMATIQ_CRON_LEAD=0), so no schedule fires.",
            )
        )
    elif not status.candidates:
        out.append(Problem("no_candidate", "No candidate was seen recently: are the workers running?"))
    if status.replicas_lacking is not None:
        out.append(Problem("replicas_lacking", status.replicas_lacking.describe(status.now_ms) + "."))
    if status.schedule_sets:
        out.append(_mixed_sets(status.schedule_sets, live, prefix))
    elif len(versions := {c.version for c in live} - {""}) > 1:
        out.append(Problem("mixed_versions", f"Candidates run different versions: {', '.join(sorted(versions))}."))
    policy = status.maxmemory_policy
    if policy is not None and policy.startswith("allkeys-"):
        out.append(
            Problem(
                "eviction_policy",
                f"maxmemory-policy is {policy}: Redis can evict the ledger and the epoch counter (schedules then "
                "restart from now and ticks can be lost). Use noeviction.",
            )
        )
    return out


def _schedule_sets(reads: StatusReads, live: Sequence[Any], leader: Any) -> list[ScheduleSet]:
    """The schedule sets of live candidates that declare different ones
    (two apps on one prefix, or a rolling deploy); none when they agree."""
    groups: dict[str, list[Any]] = {}
    for candidate in live:
        if candidate.fingerprint:
            groups.setdefault(candidate.fingerprint, []).append(candidate)
    if len(groups) < 2:
        return []
    published = reads.schedule_sets(sorted(groups))
    leading = _candidate_id(leader) if leader else None
    return [
        ScheduleSet(
            fingerprint=fingerprint,
            processes=len(group),
            versions=sorted({c.version for c in group if c.version}),
            leader=any(c.candidate_id == leading for c in group),
            schedules=sorted(s for s in (published.get(fingerprint) or {}) if s != SEMANTICS_ID),
            semantics=(published.get(fingerprint) or {}).get(SEMANTICS_ID),
        )
        for fingerprint, group in sorted(groups.items())
    ]


def _mixed_sets(sets: Sequence[ScheduleSet], live: Sequence[Any], prefix: str) -> Problem:
    if len({c.version for c in live if c.fingerprint}) > 1:
        why = (
            "the app versions differ: a rolling deploy looks under way; this clears when every process runs the "
            "same code"
        )
    else:
        why = (
            f"their versions do not tell them apart: two apps may share the prefix {prefix!r}, and only the leading "
            "app's schedules fire; give each app its own CronMiddleware(prefix=...)"
        )
    details = []
    for entry in sets:
        ids = entry.schedules
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "") if ids else "unpublished"
        details.append(
            f"set {entry.fingerprint}{' (the leader)' if entry.leader else ''}: {entry.processes} process(es), "
            f"version {', '.join(entry.versions) or 'none'}: {shown}"
        )
    return Problem(
        "mixed_schedule_sets", f"Candidates declare {len(sets)} different schedule sets: {why}.", tuple(details), 1
    )


def _candidate_id(leader: Any) -> str:
    """The candidate id in the lease's ``candidate`` field (``host|pid|id``)."""
    return str(leader.candidate).rsplit("|", 1)[-1]
