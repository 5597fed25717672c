"""The ``dramatiq-cron`` command: see and steer the scheduler of an app.

It loads the app the way ``dramatiq`` does (``module[:broker]``, with
``--path`` directories put on ``sys.path``), finds the broker's
:class:`~dramatiq_cron_middleware.CronMiddleware`, and talks to the Redis
that middleware uses.  Every command prints a table, or JSON with
``--json``; every failure is one line on stderr and a non-zero exit.

Runtime schedules (added with ``CronMiddleware.add`` or ``dramatiq-cron
add``) are listed beside declared ones, each row saying its source.

Exit statuses: 0 success; 1 ``status`` found no leader renewing its lease;
2 a usage or configuration error (bad module, no middleware, unknown
actor); 3 Redis could not be reached; 130 ``backfill`` interrupted.  ``check`` follows the
Nagios plugin convention: 0 every schedule ``ok``, ``pending`` or
``paused``, 1 one is ``late`` or ``running_long`` (or a stored runtime
definition reads differently now), 2 one is ``failing`` or ``missed`` (or a
stored runtime definition cannot be read), 3 Redis could not be reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import dramatiq
import redis
from dramatiq.brokers.stub import StubBroker

from ..errors import CronConfigurationError, CronError, CronScheduleError
from ..middleware import CronMiddleware, find_middleware
from ..monitoring.read import read_health, runtime_of
from ..monitoring.records import PROBLEMS
from ..schedules.ids import format_id, parse_id
from ..schedules.instants import instant_ms as parse_instant
from ..schedules.schedule import BoundSchedule, Schedule, of_actor
from ..service import Cron
from ..status import Problem, Status, pause_end, read_status, status_sets_json, upcoming
from ..store.codes import Outcome
from ..store.connection import credentials_refused, describe, redact, scheduler_clients
from ..store.health_reads import HealthReads
from ..store.runtime import RuntimeSchedule, RuntimeSchedules, split_id
from ..store.timing import Timing
from .backfill import DEFAULT_MAX_TICKS, instant_ms
from .control import (
    AmbiguousTarget,
    Control,
    HistoryEntry,
    Target,
    TriggerRefused,
    UnknownTarget,
    find_runtime,
    paused_by,
)
from .django_project import setup_from_environment
from .format import iso, span, when

__all__ = ["main", "EXIT_OK", "EXIT_NO_LEADER", "EXIT_ERROR", "EXIT_UNREACHABLE"]

EXIT_OK = 0
#: ``status``: no process renewed the lease within its length.
EXIT_NO_LEADER = 1
#: Bad module, no CronMiddleware on the broker, unknown actor, bad arguments.
EXIT_ERROR = 2
#: Redis did not answer.
EXIT_UNREACHABLE = 3
#: ``backfill`` was interrupted (Ctrl+C); running it again continues.
EXIT_INTERRUPTED = 130

# Short enough that an unreachable Redis is reported promptly, long enough
# for a loaded server.
_UTC = dt.timezone.utc


class _Failure(Exception):
    """A failure reported as one line on stderr."""

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class _App:
    """The loaded app: its broker, middleware and a handle on its Redis."""

    broker: dramatiq.Broker
    middleware: CronMiddleware
    control: Control
    where: str

    @property
    def schedules(self) -> list[BoundSchedule]:
        return self.middleware.all_schedules()

    def zone_of(self, schedule_id: str) -> dt.tzinfo:
        for schedule in self.schedules:
            if schedule.id == schedule_id:
                return schedule.zone
        if _source_of(schedule_id) == "runtime":
            found = self._runtime_by_id(schedule_id)
            if found:
                return found[0].zone
        return _UTC

    def target(self, args: argparse.Namespace, *, whole_actor: str = "") -> Target:
        """The one schedule (or, with ``--actor``, the actor) the command
        names; ``whole_actor`` is the sentence offering ``--actor`` where the
        command can act on a whole actor."""
        try:
            return self.cron.target(
                name=args.target,
                schedule_id=args.schedule,
                actor=getattr(args, "whole_actor", None),
                resuming=args.command == "resume",
            )
        except UnknownTarget as exc:
            raise _Failure(f"{exc} ({self.known_actors()})") from None
        except AmbiguousTarget as exc:
            choose = f"{exc}: choose one with --schedule ID"
            raise _Failure(choose + (f", or {whole_actor} with --actor {exc.actor}" if whole_actor else "")) from None

    @property
    def cron(self) -> Cron:
        """The operator service (service.py)."""
        try:
            return self.middleware.service
        except CronError as exc:
            raise _Failure(redact(str(exc))) from None

    @property
    def runtime(self) -> RuntimeSchedules:
        try:
            return self.middleware.runtime
        except CronError as exc:
            raise _Failure(redact(str(exc))) from None

    def known_actors(self) -> str:
        """The hint after an unknown name: the actors with schedules,
        declared or runtime (those with only runtime schedules too)."""
        declared = sorted({s.actor_name for s in self.schedules})
        runtime_only = sorted(set(self.runtime.count_by_actor()) - set(declared))
        text = f"cron actors: {', '.join(declared) or 'none'}"
        return text + (f"; with runtime schedules only: {', '.join(runtime_only)}" if runtime_only else "")

    def declares(self, actor_name: str) -> bool:
        """Whether the loaded app declares the actor (a runtime schedule may
        outlive its actor's code)."""
        return actor_name in self.broker.actors

    def _runtime_by_id(self, schedule_id: str) -> list[BoundSchedule]:
        found = find_runtime(self.runtime, schedule_id)
        return [] if found is None else [found]

    @property
    def health_reads(self) -> HealthReads:
        return HealthReads(self.control.client, self.middleware.keys)

    def status(self) -> Status:
        return read_status(
            self.control,
            self.health_reads,
            self.middleware,
            runtime=runtime_of(self.middleware),
            declares=self.declares,
            where=self.where,
        )


# -- loading --------------------------------------------------------------


def _load(spec: str, paths: Sequence[str]) -> _App:
    for path in reversed(paths):
        sys.path.insert(0, path)
    broker = _import_broker(spec)
    try:
        middleware = find_middleware(broker, needed_by=f"the app {spec!r}")
        client, _ = scheduler_clients(
            middleware.redis_source(broker), op_timeout_ms=Timing.OPERATOR_TIMEOUT_MS, block_timeout_ms=0
        )
    except Exception as exc:
        raise _Failure(redact(str(exc))) from None
    control = Control(client=client, keys=middleware.keys, history_length=middleware.history_length)
    return _App(broker=broker, middleware=middleware, control=control, where=describe(client))


def _import_broker(spec: str) -> dramatiq.Broker:
    module_name, _, attribute = spec.partition(":")
    try:
        setup_from_environment()  # a Django project: django.setup() first, as rundramatiq does
    except CronConfigurationError as exc:
        raise _Failure(redact(str(exc))) from None
    try:
        module = importlib.import_module(module_name)
        if not attribute:
            return dramatiq.get_broker()
        value: Any = module
        for part in attribute.split("."):
            value = getattr(value, part)
        if not isinstance(value, (dramatiq.Broker, dramatiq.Actor)) and callable(value):
            value()
            return dramatiq.get_broker()
    except Exception as exc:  # whatever the app raised on import: one line, no traceback
        raise _Failure(f"cannot load {spec!r}: {redact(f'{type(exc).__name__}: {exc}')}") from None
    if not isinstance(value, dramatiq.Broker):
        raise _Failure(f"cannot load {spec!r}: {attribute!r} is not a dramatiq Broker")
    return value


# -- formatting -----------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(_row(row, widths) for row in cells)


def _emit(args: argparse.Namespace, data: object, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(text)


# -- commands -------------------------------------------------------------


def _list(app: _App, args: argparse.Namespace) -> int:
    now = app.control.server_ms()
    last = app.control.last_decisions()
    paused = app.control.pauses()
    needle = None if args.search is None else args.search.lower()
    declared = [
        s
        for s in app.schedules
        if (args.actor is None or s.actor_name == args.actor) and (needle is None or needle in s.id.lower())
    ]
    if args.actor is not None and not declared and not app.runtime.list(actor=args.actor, limit=1).items:
        raise _Failure(f"no schedules of actor {args.actor!r} ({app.known_actors()})")
    out = _Listing(args, now_iso=iso(now))
    health = _health_of(app, declared, now)
    out.add([_listed(app, s, None, now, last, paused, args.next, health) for s in declared])
    shown, cursor, total = 0, None, None
    while args.limit is None or shown < args.limit:
        # Streamed a page at a time: any number of runtime schedules, in
        # memory one page at a time.
        wanted = _PAGE if args.limit is None else min(_PAGE, args.limit - shown)
        page = app.middleware.list(actor=args.actor, search=args.search, cursor=cursor, limit=wanted)
        total = page.total if cursor is None else total
        health = _health_of(app, [r.schedule for r in page.items], now)
        out.add([_listed(app, r.schedule, r, now, last, paused, args.next, health) for r in page.items])
        shown += len(page.items)
        cursor = page.cursor
        if cursor is None:
            break
    out.close(runtime_total=total, more=None if cursor is None else (-1 if total is None else total - shown))
    return EXIT_OK


def _health_of(app: _App, schedules: Sequence[BoundSchedule], now: int) -> dict[str, str]:
    report = read_health(app.health_reads, schedules, now_ms=now, policy=app.middleware.health_policy)
    return {h.schedule_id: h.health for h in report.schedules}


# Runtime schedules read and printed per page by ``list``.
_PAGE = 1000
_LIST_HEADERS = [
    "ACTOR",
    "NAME",
    "SOURCE",
    "EXPRESSION",
    "ZONE",
    "NEXT",
    "LAST TICK",
    "OUTCOME",
    "HEALTH",
    "PAUSED",
]


def _listed(
    app: _App,
    s: BoundSchedule,
    stored: RuntimeSchedule | None,
    now: int,
    last: dict[str, Any],
    paused: dict[str, int | None],
    count: int,
    health: dict[str, str],
) -> tuple[dict[str, Any], list[str]]:
    """One schedule of ``list``: its JSON record and its table row."""
    ticks = upcoming(s, now, count)
    decision = last.get(s.id)
    is_paused = paused_by(s, paused) is not None
    record = {
        "id": s.id,
        "actor": s.actor_name,
        "source": s.source,
        "declared": app.declares(s.actor_name),
        "revision": None if stored is None else stored.revision,
        "schedule": s.id,
        "name": s.name if s.named else None,
        "expression": s.expression,
        "timezone": s.timezone,
        "queue": s.queue_name,
        "catch_up": s.catch_up,
        "overlap": s.overlap,
        "next": [iso(t, s.zone) for t in ticks],
        "last_tick": iso(decision.tick_ms, s.zone) if decision else None,
        "last_outcome": decision.outcome if decision else None,
        "last_epoch": decision.epoch if decision else None,
        "paused": is_paused,
        "paused_until": None if (end := pause_end(s, paused)) is None else iso(end),
        "description": s.description or None,
        "at": None if s.at is None else iso(s.at, s.zone),
        "done": _done(s, decision.tick_ms if decision else None),
        "health": health.get(s.id),
    }
    row = [
        s.actor_name,
        s.name if s.named else "-",
        s.source if record["declared"] else f"{s.source} (actor not declared)",
        s.expression,
        s.timezone,
        ", ".join(when(t, s.zone) for t in ticks) or _ended(s, decision),
        when(decision.tick_ms, s.zone) if decision else "-",
        decision.outcome if decision else "-",
        health.get(s.id, "-"),
        _paused_text(s, paused, now),
    ]
    return record, row


class _Listing:
    """``list``'s output, written as it comes: a table (its first page of
    rows held back to size the columns, which then only widen), or one JSON
    document written record by record."""

    def __init__(self, args: argparse.Namespace, *, now_iso: str) -> None:
        self.json = args.json
        self.widths = [len(h) for h in _LIST_HEADERS]
        self.held: list[list[str]] = []
        self.count = 0
        if self.json:
            sys.stdout.write(f'{{"now": {json.dumps(now_iso)}, "schedules": [')

    def add(self, items: Sequence[tuple[dict[str, Any], list[str]]]) -> None:
        for record, row in items:
            if self.json:
                sys.stdout.write(("," if self.count else "") + "\n  " + json.dumps(record))
            else:
                self.held.append(row)
            self.count += 1
        if len(self.held) >= _PAGE:
            self._flush()
        sys.stdout.flush()

    def _flush(self) -> None:
        if not self.held:
            return
        self.widths = [max(w, *(len(r[i]) for r in self.held)) for i, w in enumerate(self.widths)]
        if self.count == len(self.held):  # the first rows: the header goes first
            print(_row(_LIST_HEADERS, self.widths))
        for row in self.held:
            print(_row(row, self.widths))
        self.held = []

    def close(self, *, runtime_total: int | None, more: int | None) -> None:
        """End the output; ``more`` runtime schedules were left out by
        ``--limit`` (-1: some, uncounted)."""
        if self.json:
            sys.stdout.write(f'\n], "runtime_total": {json.dumps(runtime_total)}}}\n')
            return
        self._flush()
        if not self.count:
            print("No cron schedules.")
        if more:
            print(f"... and {'more' if more < 0 else f'{more} more'} runtime schedules (see --limit).")


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def _paused_text(schedule: BoundSchedule, pauses: dict[str, int | None], now: int) -> str:
    if paused_by(schedule, pauses) is None:
        return "no"
    expiry = pause_end(schedule, pauses)
    return "yes" if expiry is None else f"until {when(expiry)} ({span(expiry - now)} left)"


def _done(schedule: BoundSchedule, last_tick: int | None) -> bool | None:
    """For a one-shot, whether its tick was decided (None otherwise)."""
    if schedule.at is None:
        return None
    return last_tick is not None and last_tick >= schedule.at


def _ended(schedule: BoundSchedule, decision: Any) -> str:
    if schedule.at is not None:
        return f"done ({decision.outcome})" if _done(schedule, decision and decision.tick_ms) else "none"
    return "none (ended)"


def _status(app: _App, args: argparse.Namespace) -> int:
    status = app.status()
    _emit(args, status.to_json(), "\n".join(_status_lines(status)))
    return EXIT_OK if status.healthy else EXIT_NO_LEADER


# Each problem's label in ``status``'s text; None: the Leader and Status
# lines say it.
_PROBLEM_LABELS = {"no_leader": None, "stale_lease": None, "replicas_lacking": "Replicas:"}
_CANDIDATE_HEADERS = ["HOST", "PID", "CANDIDATE", "SCHEDULES", "VERSION", "LAST SEEN", "LEADER"]


def _status_lines(s: Status) -> list[str]:
    now, leader = s.now_ms, s.leader
    lines = [f"Redis:      {s.where} reachable ({s.round_trip_ms:.1f} ms round trip)"]
    if leader is None:
        lines.append(f"Leader:     none (no process holds the lease; lease length {span(s.lease_ms)})")
    else:
        lines += [
            f"Leader:     {leader.host} pid {leader.pid}, epoch {leader.epoch}",
            f"Since:      {when(leader.since_ms)} ({span(now - leader.since_ms)} ago)",
            f"Lease:      renewed {span(now - leader.renewed_ms)} ago, "
            f"{span(leader.remaining_ms)} of {span(leader.ttl_ms)} left",
        ]
    listed = span(s.listed_ms)
    lines.append(f"Candidates: {len(s.candidates)} seen in the last {listed}")
    seen = [
        [c.host, c.pid, c.candidate_id, c.fingerprint or "-", c.version or "-", f"{span(now - c.seen_ms)} ago", mark]
        for c, mark in ((c, "yes" if s.is_leader(c) else "") for c in s.candidates)
    ]
    lines += [_table(_CANDIDATE_HEADERS, seen)] if seen else []
    if s.ineligible:
        lines.append(
            f"Not eligible: {len(s.ineligible)} process(es) with lead=False seen in the last {span(s.listed_ms)}"
        )
        rows = [[c.host, c.pid, c.candidate_id, span(now - c.seen_ms) + " ago"] for c in s.ineligible]
        lines.append(_table(["HOST", "PID", "CANDIDATE", "LAST SEEN"], rows))
    line = f"Runtime:    {s.runtime_total} runtime schedule(s) for {len(s.runtime_by_actor)} actor(s)"
    if s.undeclared:
        line += "; actors this app does not declare: " + ", ".join(f"{a} ({n})" for a, n in s.undeclared.items())
    lines.append(line)
    lines += ["Schedules:", *(f"  {i}: {text}" for i, text in s.descriptions.items())] if s.descriptions else []
    counts = ", ".join(f"{n} {state}" for state, n in s.health.report.counts().items())
    lines.append("Health:     " + (counts or "no schedules"))
    lines.append(f"Paused:     {len(s.pauses)} actor(s) or schedule(s)")
    for problem in s.problems:
        label = _PROBLEM_LABELS.get(problem.kind, "Warning:")
        lines += [] if label is None else _problem_lines(label, problem)
    if not s.healthy:
        lines.append("Status:     NO LEADER - no process renewed the lease within its length")
    return lines


def _problem_lines(label: str, problem: Problem) -> list[str]:
    return [f"{label:<11} {problem.text}", *(f"{'':<11} {line}" for line in problem.details)]


def _check(app: _App, args: argparse.Namespace) -> int:
    status = app.status()
    runtime = runtime_of(app.middleware)
    report = dataclasses.replace(status.health.report, stored=[] if runtime is None else runtime.recheck())
    rows = [
        [
            h.schedule_id,
            h.health,
            "-" if h.since_ms is None else when(h.since_ms),
            "-" if h.last_run is None else f"{h.last_run.outcome} ({when(h.last_run.tick_ms)})",
            (h.last_run.error or "") if h.last_run is not None else "",
        ]
        for h in sorted(report.schedules, key=lambda h: (-PROBLEMS.get(h.health, 0), h.schedule_id))
    ]
    counts = ", ".join(f"{n} {state}" for state, n in report.counts().items())
    text = _table(["SCHEDULE", "HEALTH", "SINCE", "LAST RUN", "ERROR"], rows) if rows else "No cron schedules."
    unregistered = sum(h.health == "missed" and not h.registered for h in report.schedules)
    if unregistered:
        counts += (
            f"\n{unregistered} missed schedule(s) were never registered by any process: no worker of this app "
            "runs against this Redis and prefix, or every process has lead=False (see dramatiq-cron status)."
        )
    warnings = [line for p in status.problems if p.level for line in _problem_lines("Warning:", p)]
    text += (f"\n{counts}" if counts else "") + "".join(f"\n{line}" for line in warnings)
    if report.stored:
        stored = [[p.schedule_id, p.kind, p.detail] for p in report.stored]
        text += "\n\nStored runtime definitions:\n" + _table(["SCHEDULE", "PROBLEM", "DETAIL"], stored)
    _emit(args, {**report.to_json(), **status_sets_json(status)}, text)
    # Schedules of the app that does not lead never fire: at least a warning.
    return max(report.exit_code, status.check_level)


def _runs(app: _App, args: argparse.Namespace) -> int:
    target = app.target(args)
    assert target.schedule_id is not None
    zone = app.zone_of(target.schedule_id)
    runs = app.cron.runs(target.schedule_id, limit=args.limit)
    rows = [
        [
            when(r.tick_ms, zone),
            r.outcome,
            "-" if r.started_ms is None else when(r.started_ms, zone),
            "-" if r.duration_ms is None else span(r.duration_ms),
            r.attempt,
            r.host or "-",
            r.pid or "-",
            r.error or "",
        ]
        for r in runs
    ]
    headers = ["TICK", "OUTCOME", "STARTED", "DURATION", "ATTEMPT", "HOST", "PID", "ERROR"]
    text = _table(headers, rows) if rows else f"No runs of {target.schedule_id} recorded."
    _emit(args, {"runs": [r.to_json() for r in runs]}, text)
    return EXIT_OK


def _history(app: _App, args: argparse.Namespace) -> int:
    match = None
    if args.actor:
        # History is read, not acted on: an actor name shows all of its
        # schedules (entries match by actor), a schedule id that one only.
        try:
            app.cron.target(actor=args.actor)
        except UnknownTarget:
            try:
                app.cron.target(args.actor)
            except UnknownTarget:
                raise _Failure(f"unknown cron actor or schedule {args.actor!r}") from None
        match = {args.actor}
    entries = list(reversed(app.cron.history(limit=args.limit, match=match)))
    records = [_history_record(app, e) for e in entries]
    rows = [
        [
            when(e.at_ms),
            e.outcome,
            _source_of(e.schedule_id),
            e.schedule_id,
            # An operator action (pause, add...) has no tick of its own.
            "" if e.who and e.outcome != Outcome.TRIGGERED else when(e.tick_ms, app.zone_of(e.schedule_id)),
            r["delay"] or "",
            "" if e.epoch is None else e.epoch,
            e.who,
            "" if e.detail.isdigit() else e.detail,  # a bare number is the delay, shown already
        ]
        for e, r in zip(entries, records, strict=True)
    ]
    headers = ["WHEN", "OUTCOME", "SOURCE", "SCHEDULE", "TICK", "DELAY", "EPOCH", "BY", "DETAIL"]
    text = _table(headers, rows) if rows else "No history."
    _emit(args, {"entries": records}, text)
    return EXIT_OK


def _history_record(app: _App, e: HistoryEntry) -> dict[str, Any]:
    delay_ms = int(e.detail) if e.outcome in (Outcome.FIRED, Outcome.CAUGHT_UP) and e.detail.isdigit() else None
    return {
        "at": iso(e.at_ms),
        "outcome": e.outcome,
        "source": _source_of(e.schedule_id),
        "schedule": e.schedule_id,
        "actor": parse_id(e.schedule_id).actor if _source_of(e.schedule_id) == "runtime" else e.actor_name,
        "tick": iso(e.tick_ms, app.zone_of(e.schedule_id)),
        "tick_ms": e.tick_ms,
        "delay_ms": delay_ms,
        "delay": None if delay_ms is None else "+" + span(delay_ms),
        "epoch": e.epoch,
        "detail": e.detail,
        "message_id": e.message_id or None,
        "who": e.who or None,
    }


def _trigger(app: _App, args: argparse.Namespace) -> int:
    target = app.target(args)
    schedule = target.schedule
    assert schedule is not None  # trigger has no --actor
    try:
        done = app.cron.trigger(target=target, who="cli")
    except TriggerRefused as exc:
        raise _Failure(str(exc)) from None
    data = {
        "actor": schedule.actor_name,
        "schedule": schedule.id,
        "queue": done.queue_name,
        "message_id": done.message_id,
        "tick": done.tick,
        "recorded_at": iso(done.recorded_ms),
    }
    text = (
        f"Triggered {schedule.actor_name} ({schedule.id}): message {done.message_id} "
        f"enqueued on queue {done.queue_name!r}, tick {done.tick}."
    )
    _emit(args, data, text)
    return EXIT_OK


def _pause(app: _App, args: argparse.Namespace) -> int:
    verb = "pause" if args.command == "pause" else "resume"
    target = app.target(args, whole_actor=f"{verb} all of them")
    cron = app.cron
    if args.command == "pause":
        try:
            done = cron.pause(target=target, until=args.until, duration=args.pause_for, who="cli")
        except CronScheduleError as exc:
            raise _Failure(str(exc)) from None
        until = done.until_ms
        lasting = "" if until is None else f" until {when(until)} ({span(until - done.at_ms)} from now)"
        lasting += ", then resumes by itself" if until is not None else ""
        text = (
            f"Paused {target}{lasting}: whichever process leads records its ticks as paused and enqueues nothing."
            if done.changed
            else f"{target} was already paused; now{lasting or ' until resumed'}."
        )
    else:
        done = cron.resume(target=target, who="cli")
        text = f"Resumed {target}: its next tick fires." if done.changed else f"{target} was not paused."
        blocker = None if done.changed or target.schedule is None else paused_by(target.schedule, cron.paused())
        if blocker is not None and blocker.schedule_id is None:
            text += f" Its actor is paused as a whole: resume it with --actor {target.actor_name}."
    data = {
        "target": target.member,
        "actor": target.actor_name,
        "schedule": target.schedule_id,
        "changed": done.changed,
        "until": None if done.until_ms is None else iso(done.until_ms),
        "paused": sorted(cron.paused()),
    }
    _emit(args, data, text)
    return EXIT_OK


def _backfill(app: _App, args: argparse.Namespace) -> int:
    if args.start is None or args.end is None:
        raise _Failure(
            "backfill needs --from and --to (an open range cannot be backfilled), "
            f"got --from {args.start!r} --to {args.end!r}"
        )
    if args.max < 1:
        raise _Failure(f"--max must be at least 1, got {args.max}")
    target = app.target(args)
    schedule = target.schedule
    assert schedule is not None  # backfill has no --actor
    if isinstance(app.broker, StubBroker) and not args.dry_run:
        raise _Failure("the app's broker is a StubBroker: backfilled messages would only live in this process")
    cron = app.cron
    try:
        plan = cron.backfill_plan(
            target,
            start=instant_ms(args.start, what="--from"),
            end=instant_ms(args.end, what="--to"),
            include_fired=args.include_fired,
            max_ticks=None if args.yes else args.max,
        )
    except CronScheduleError as exc:
        raise _Failure(str(exc)) from None
    zone = schedule.zone
    if args.dry_run:
        plan = cron.backfill_listed(plan)
        data = _backfill_data(schedule, plan, args, plan)
        text = "\n".join(
            [
                f"Would backfill {len(plan.ticks)} tick(s) of {schedule.id} ({_left_out(plan, plan)}):",
                *(when(t, zone) for t in plan.ticks),
            ]
        )
        _emit(args, data, text)
        return EXIT_OK
    if plan.streamed and plan.total:
        print(
            f"Backfilling {plan.total:,} tick(s) of {schedule.id} in [{when(plan.start_ms, zone)}, "
            f"{when(plan.end_ms, zone)}), a thousand at a time (Ctrl+C stops; running it again continues).",
            file=sys.stderr,
            flush=True,
        )
    try:
        report = cron.backfill_run(plan, progress=_progress_bar(f"Backfilling {schedule.id}"))
    except KeyboardInterrupt:
        raise _Failure(
            "interrupted: run the same command again to enqueue the rest (no tick is enqueued twice)", EXIT_INTERRUPTED
        ) from None
    except CronScheduleError as exc:
        raise _Failure(str(exc)) from None
    except (redis.RedisError, CronError):
        raise
    except Exception as exc:  # the broker's enqueue (or a middleware hook) failed: one line, no traceback
        detail = redact(f"{type(exc).__name__}: {exc}")
        raise _Failure(
            f"backfill of {schedule.id} stopped: enqueueing failed ({detail}); run it again to continue"
        ) from None
    left_out = report.left_out if plan.streamed else plan
    data = _backfill_data(schedule, plan, args, left_out)
    data["enqueued"] = [iso(t, zone) for t in report.enqueued]
    data["claimed_before"] = [iso(t, zone) for t in report.claimed_before]
    data["left_out"]["leader"] += [iso(t, zone) for t in report.leaders]
    data["counts"] = {
        "ticks": plan.total,
        **{k: report.counts.get(k, 0) for k in ("enqueued", "claimed_before", "leaders")},
        **({k: report.counts.get(k, 0) for k in ("fired", "unconfirmed", "unknown")} if plan.streamed else {}),
    }
    enqueued = report.counts.get("enqueued", 0)
    text = (
        f"Backfilled {enqueued} tick(s) of {schedule.id} on queue {schedule.queue_name!r} "
        f"({_left_out(left_out, plan, report)})."
    )
    if report.claimed_before:
        text += f" {report.counts['claimed_before']} were claimed by another backfill running at the same time."
    _emit(args, data, text)
    return EXIT_OK


def _backfill_data(schedule: BoundSchedule, plan: Any, args: argparse.Namespace, left: Any) -> dict[str, Any]:
    """``backfill --json``: the range, and the ticks listed (each list holds
    at most its first 10,000 in a run over a longer range; ``counts`` has
    how many)."""
    zone = schedule.zone
    return {
        "schedule": schedule.id,
        "from": iso(plan.start_ms, zone),
        "to": iso(plan.end_ms, zone),
        "dry_run": args.dry_run,
        "ticks": [iso(t, zone) for t in plan.ticks],
        "left_out": {
            "fired": [iso(t, zone) for t in left.fired],
            "unconfirmed": [iso(t, zone) for t in left.unconfirmed],
            "unknown": [iso(t, zone) for t in left.unknown],
            "leader": [iso(t, zone) for t in plan.leaders],
        },
    }


def _left_out(left: Any, plan: Any, report: Any = None) -> str:
    """What a backfill leaves out, in words."""

    def count(field: str) -> int:
        if report is not None and plan.streamed:
            return int(report.counts.get(field, 0))
        return len(getattr(left, field))

    leaders = len(plan.leaders) if not plan.streamed else count("leaders")
    fired, unconfirmed, unknown = count("fired"), count("unconfirmed"), count("unknown")
    return (
        f"left out: {fired} already fired, triggered or backfilled"
        + (
            f", {unconfirmed} claimed by a backfill that has not settled them "
            "(still running, or killed: then they may be lost)"
            if unconfirmed
            else ""
        )
        + (f", {unknown} older than the history reaches (--include-fired takes them)" if unknown else "")
        + (f", {leaders} after the last decided tick (the leader's)" if leaders else "")
    )


def _progress_bar(label: str) -> Any:
    """A progress bar on stderr, only when it is a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        filled = 30 * done // max(total, 1)
        sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _web(app: _App, args: argparse.Namespace) -> int:
    from ..web.server import serve

    options = {"read_only": args.read_only, "insecure": args.insecure_bind, "allowed_hosts": args.allowed_host or []}
    try:
        serve(app.broker, bind=args.bind, auth=args.auth, token=args.token, **options)
    except ValueError as exc:
        raise _Failure(str(exc)) from None
    return EXIT_OK


def _source_of(schedule_id: str) -> str:
    """``code`` or ``runtime``: declared ids are ``actor`` or ``actor/name``
    (actor names contain no ``:``), runtime ids ``actor:name``; ``actor``
    for an action on a whole actor (``actor:*``)."""
    if schedule_id.endswith(":*"):
        return "actor"
    return "runtime" if parse_id(schedule_id).runtime else "code"


def _json_option(flag: str, text: str | None, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _Failure(f"{flag} is not JSON ({exc}): {text!r}") from None
    if not isinstance(value, kind):
        raise _Failure(f"{flag} must be a JSON {'array' if kind is list else 'object'}, got {text!r}")
    return value


def _instant_option(flag: str, text: str | None) -> int | None:
    """Epoch milliseconds (ASCII digits), or an ISO 8601 time with its offset."""
    if text is None:
        return None
    try:
        return parse_instant(text)
    except ValueError as exc:
        raise _Failure(f"{flag}: {exc}") from None


def schedule_of(args: argparse.Namespace) -> Schedule:
    """The :class:`Schedule` that ``add``'s arguments describe."""
    if [args.expression, args.every, args.at].count(None) != 2:
        raise _Failure("give one of a cron EXPRESSION, --every MS or --at WHEN (not both, not none)")
    with of_actor(args.actor):
        return Schedule(
            args.expression,
            timezone=args.timezone,
            args=tuple(_json_option("--args", args.args, list)),
            kwargs=_json_option("--kwargs", args.kwargs, dict),
            catch_up=args.catch_up,
            catch_up_window=args.catch_up_window,
            jitter=args.jitter,
            max_age=args.max_age,
            overlap=args.overlap,
            overlap_ttl=args.overlap_ttl,
            options=_json_option("--options", args.options, dict),
            every=args.every,
            offset=args.offset,
            start=_instant_option("--start", args.start),
            end=_instant_option("--end", args.end),
            at=_instant_option("--at", args.at),
            description=args.description,
            grace=args.grace,
            max_runtime=args.max_runtime,
            failure_threshold=args.failure_threshold,
        )


def _add(app: _App, args: argparse.Namespace) -> int:
    schedule = schedule_of(args)
    try:
        stored = app.cron.add(args.actor, schedule, name=args.name, replace=not args.create_only, who="cli")
    except CronScheduleError as exc:
        raise _Failure(_with_actors(app, str(exc))) from None
    except CronConfigurationError as exc:
        raise _Failure(redact(str(exc))) from None
    _emit(args, runtime_record(stored), _added_text(stored))
    return EXIT_OK


def _with_actors(app: _App, message: str) -> str:
    """An error about an undeclared actor, with the actors there are."""
    return f"{message} ({app.known_actors()})" if "is not declared on the broker" in message else message


def runtime_record(stored: RuntimeSchedule) -> dict[str, Any]:
    s = stored.schedule
    return {
        "schedule": s.id,
        "actor": s.actor_name,
        "name": s.name,
        "source": s.source,
        "revision": stored.revision,
        "expression": s.expression,
        "every": s.every,
        "offset": s.offset,
        "timezone": s.timezone,
        "queue": s.queue_name,
        "args": list(s.args),
        "kwargs": s.kwargs,
        "catch_up": s.catch_up,
        "catch_up_window": s.catch_up_window,
        "jitter": s.jitter,
        "max_age": s.max_age,
        "overlap": s.overlap,
        "overlap_ttl": s.overlap_ttl,
        "options": s.options,
        "start": None if s.start is None or s.at is not None else iso(s.start, s.zone),
        "end": None if s.end is None or s.at is not None else iso(s.end, s.zone),
        "at": None if s.at is None else iso(s.at, s.zone),
        "description": s.description or None,
        "grace": s.grace,
        "max_runtime": s.max_runtime,
        "failure_threshold": s.failure_threshold,
        "created": iso(stored.created_ms),
        "updated": iso(stored.updated_ms),
        "next": None if stored.next_ms is None else iso(stored.next_ms, s.zone),
    }


def _added_text(stored: RuntimeSchedule) -> str:
    s = stored.schedule
    upcoming = "no tick follows (past its end)" if stored.next_ms is None else f"next {when(stored.next_ms, s.zone)}"
    return f"Stored runtime schedule {s.id} (revision {stored.revision}): {s.expression} in {s.timezone}, {upcoming}."


def _remove(app: _App, args: argparse.Namespace) -> int:
    try:
        actor, name = split_id(args.actor) if args.name is None else (args.actor, args.name)
        removed = app.cron.remove(actor, name, who="cli")
    except CronScheduleError as exc:
        raise _Failure(str(exc)) from None
    except CronConfigurationError as exc:
        raise _Failure(redact(str(exc))) from None
    schedule_id = format_id(actor, name, runtime=True)
    if not removed and not app.declares(actor) and actor not in app.runtime.count_by_actor():
        raise _Failure(f"unknown actor {actor!r} ({app.known_actors()})")
    text = (
        f"Removed runtime schedule {schedule_id}: it fires no more."
        if removed
        else f"There was no runtime schedule {schedule_id} (nothing to remove)."
    )
    _emit(args, {"schedule": schedule_id, "removed": removed}, text)
    return EXIT_OK


# -- entry point ----------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dramatiq-cron",
        description="See and steer the cron schedules of a dramatiq app.",
        epilog="Exit status: 0 ok, 1 no live leader (status), 2 error, 3 Redis unreachable; "
        "check: 0 ok, 1 warning, 2 critical, 3 Redis unreachable.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, *, output: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument("app", metavar="APP", help="the app's module, optionally module:broker (as for dramatiq)")
        sub.add_argument(
            "--path", "-P", action="append", default=[], metavar="DIR", help="a directory to import the app from"
        )
        if output:  # a command that prints a result (not web)
            sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
        return sub

    sub = command("list", "every schedule, its next fire times, last tick and whether it is paused")
    sub.add_argument("--next", type=int, default=3, metavar="N", help="how many next fire times to show (default 3)")
    sub.add_argument("--actor", metavar="ACTOR", help="only this actor's schedules")
    sub.add_argument("--search", metavar="TEXT", help="only schedules whose id contains TEXT (ignoring case)")
    sub.add_argument("--limit", type=int, metavar="N", help="show at most N runtime schedules (default: all, streamed)")
    command("status", "the current leader, the candidates, and whether the lease is being renewed")
    sub = command("history", "recent tick outcomes, oldest first")
    sub.add_argument("actor", nargs="?", metavar="ACTOR", help="only this actor (or schedule id)")
    sub.add_argument("--limit", "-n", type=int, default=20, metavar="N", help="how many entries (default 20)")
    command(
        "check",
        "each schedule's health and the stored runtime definitions this version reads differently or not at all; "
        "exit 0 all ok, 1 late, running long or read differently, 2 failing, missed or unreadable",
    )
    for name, help in (
        ("runs", "a schedule's recent runs, newest first: outcome, start, duration, host, error"),
        ("trigger", "enqueue a schedule's message now, marked manual; the schedule is left as it is"),
        ("pause", "stop firing a schedule's (or, with --actor, every schedule of an actor's) ticks until resumed"),
        ("resume", "undo pause"),
    ):
        sub = command(name, help)
        which = sub.add_mutually_exclusive_group(required=True)
        which.add_argument(
            "target",
            nargs="?",
            metavar="TARGET",
            help="a schedule id, or the name of an actor that has one schedule (see list)",
        )
        which.add_argument(
            "--schedule", metavar="ID", help="exactly this schedule id (an unnamed schedule's is its actor)"
        )
        if name == "runs":
            sub.add_argument("--limit", "-n", type=int, default=20, metavar="N", help="how many runs (default 20)")
        if name not in ("trigger", "runs"):
            which.add_argument("--actor", dest="whole_actor", metavar="ACTOR", help="every schedule of this actor")
        if name == "pause":
            lasting = sub.add_mutually_exclusive_group()
            lasting.add_argument(
                "--for", dest="pause_for", metavar="DURATION", help="resume by itself after this long (2h, 90m, 1d)"
            )
            lasting.add_argument(
                "--until", metavar="WHEN", help="resume by itself at this instant (ISO 8601 with offset, or epoch ms)"
            )
    sub = command("backfill", "enqueue each past tick of a schedule in [--from, --to) once, marked as a backfill")
    which = sub.add_mutually_exclusive_group(required=True)
    which.add_argument("target", nargs="?", metavar="TARGET", help="a schedule id, or an actor that has one schedule")
    which.add_argument("--schedule", metavar="ID", help="exactly this schedule id")
    sub.add_argument("--from", dest="start", metavar="WHEN", help="first instant (ISO 8601 with offset, or epoch ms)")
    sub.add_argument("--to", dest="end", metavar="WHEN", help="end of the range, exclusive")
    sub.add_argument("--include-fired", action="store_true", help="also enqueue ticks that fired already")
    sub.add_argument("--dry-run", action="store_true", help="list the ticks, enqueue nothing")
    sub.add_argument("--yes", action="store_true", help="allow a range of more than --max ticks")
    sub.add_argument(
        "--max", type=int, default=DEFAULT_MAX_TICKS, metavar="N", help="refuse more ticks than N (default 10000)"
    )
    sub = command("add", "create or replace a runtime schedule of a declared actor (no deploy needed)")
    sub.add_argument("actor", metavar="ACTOR", help="the actor's name")
    sub.add_argument("expression", nargs="?", metavar="EXPRESSION", help="a cron expression (or use --every)")
    sub.add_argument(
        "--name", required=True, help="its name among the actor's runtime schedules ([A-Za-z0-9_.-]{1,64})"
    )
    sub.add_argument("--timezone", metavar="ZONE", help="IANA zone of the expression (default: the middleware's)")
    sub.add_argument("--args", metavar="JSON", help="the message's positional arguments, a JSON array")
    sub.add_argument("--kwargs", metavar="JSON", help="the message's keyword arguments, a JSON object")
    sub.add_argument("--every", type=int, metavar="MS", help="an interval in ms instead of an expression")
    sub.add_argument("--offset", type=int, default=0, metavar="MS", help="with --every: where in the interval (ms)")
    sub.add_argument("--start", metavar="WHEN", help="first instant it may fire: epoch ms or ISO 8601 with offset")
    sub.add_argument("--end", metavar="WHEN", help="instant from which it no longer fires (exclusive)")
    sub.add_argument(
        "--catch-up",
        choices=("each", "latest", "none"),
        help="missed ticks a new leader fires (default: the middleware's)",
    )
    sub.add_argument("--catch-up-window", type=int, metavar="MS", help="how far back missed ticks are caught up (ms)")
    sub.add_argument("--jitter", type=int, default=0, metavar="MS", help="up to MS of delay per message (default 0)")
    sub.add_argument("--max-age", type=int, metavar="MS", help="drop a message that waited longer than MS")
    sub.add_argument(
        "--overlap", choices=("allow", "skip"), default="allow", help="skip a tick while the previous run goes on"
    )
    sub.add_argument("--overlap-ttl", type=int, metavar="MS", help="with --overlap skip: the longest a run counts")
    sub.add_argument("--options", metavar="JSON", help="further message options, a JSON object")
    sub.add_argument(
        "--create-only", action="store_true", help="refuse (exit 2) if the schedule exists, instead of replacing it"
    )
    sub.add_argument(
        "--at", metavar="WHEN", help="a one-shot: fire once at this instant (ISO 8601 with offset, or epoch ms)"
    )
    sub.add_argument("--description", metavar="TEXT", help="what the schedule is for (up to 500 characters)")
    sub.add_argument("--grace", type=int, metavar="MS", help="late if a run has not started MS after its tick")
    sub.add_argument("--max-runtime", type=int, metavar="MS", help="running_long if a run takes longer than MS")
    sub.add_argument("--failure-threshold", type=int, metavar="N", help="failing after N failed runs in a row")
    sub = command("remove", "remove a runtime schedule; it never fires again")
    sub.add_argument("actor", metavar="ID|ACTOR", help="the schedule's id (actor:name), or its actor's name and NAME")
    sub.add_argument("name", nargs="?", metavar="NAME", help="the runtime schedule's name")
    sub = command("web", "serve the web dashboard (binds 127.0.0.1:8080 unless --bind says otherwise)", output=False)
    sub.add_argument("--bind", default="127.0.0.1:8080", metavar="HOST:PORT", help="where to listen")
    who = sub.add_mutually_exclusive_group()
    who.add_argument(
        "--auth", metavar="USER:PASSWORD", help="require HTTP basic auth (default: $DRAMATIQ_CRON_WEB_AUTH)"
    )
    who.add_argument(
        "--token",
        metavar="TOKEN",
        help="require this bearer token, or ?token= once (default: $DRAMATIQ_CRON_WEB_TOKEN)",
    )
    sub.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    sub.add_argument(
        "--insecure-bind", action="store_true", help="allow a non-loopback address without --auth or --token"
    )
    sub.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="a Host name it answers for besides the loopback names and the bound address "
        "(repeatable; '.example.com' for a domain and its subdomains)",
    )
    return parser


_COMMANDS = {
    "list": _list,
    "status": _status,
    "history": _history,
    "check": _check,
    "runs": _runs,
    "trigger": _trigger,
    "pause": _pause,
    "resume": _pause,
    "add": _add,
    "backfill": _backfill,
    "remove": _remove,
    "web": _web,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dramatiq-cron``; returns the exit status."""
    args = parser().parse_args(argv)
    limit = "-n/--limit" if args.command == "history" else "--limit"
    for flag, value in (("--next", getattr(args, "next", None)), (limit, getattr(args, "limit", None))):
        if value is not None and value < 1:
            return _fail(f"{flag} must be at least 1, got {value}")
    app: _App | None = None
    try:
        app = _load(args.app, args.path or ["."])
        return _COMMANDS[args.command](app, args)
    except _Failure as exc:
        return _fail(str(exc), exc.status)
    except redis.RedisError as exc:
        where = app.where if app else "?"
        refused = credentials_refused(exc, where)
        if refused is not None:  # Redis answered: not unreachable
            return _fail(refused)
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            return _fail(f"cannot reach Redis at {where}: {redact(str(exc))}", EXIT_UNREACHABLE)
        return _fail(f"Redis error: {redact(f'{type(exc).__name__}: {exc}')}")
    except CronError as exc:  # for example a runtime key holding a foreign value
        return _fail(redact(str(exc)))
    finally:
        if app is not None:
            app.control.client.close()


def _fail(message: str, status: int = EXIT_ERROR) -> int:
    print(f"dramatiq-cron: error: {message}", file=sys.stderr)
    return status


def run() -> NoReturn:
    """``python -m dramatiq_cron_middleware``."""
    sys.exit(main())
