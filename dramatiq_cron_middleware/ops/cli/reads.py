"""The commands that read: ``list``, ``status``, ``check``, ``runs`` and
``history``, each rendering what the service and ``status.Status`` return."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ...monitoring.read import read_health
from ...monitoring.records import PROBLEMS
from ...schedules.ids import parse_id
from ...schedules.schedule import BoundSchedule
from ...status import Problem, Status, pause_end, status_sets_json, upcoming
from ...store.codes import Outcome
from ...store.runtime import RuntimeSchedule
from ...targets import UnknownTarget, paused_by
from ...times import iso, span, when
from .app import App, Failure, emit, row, source_of, table

#: ``status``: no process renewed the lease within its length.
EXIT_NO_LEADER = 1

# Runtime schedules read and printed per page by ``list``.
_PAGE = 1000
_LIST_HEADERS = ["ACTOR", "NAME", "SOURCE", "EXPRESSION", "ZONE", "NEXT", "LAST TICK", "OUTCOME", "HEALTH", "PAUSED"]


def list_schedules(app: App, args: argparse.Namespace) -> int:
    now = app.cron.store.server_ms()
    paused = app.cron.pauses()
    needle = None if args.search is None else args.search.lower()
    declared = [
        s
        for s in app.middleware.all_schedules()
        if (args.actor is None or s.actor_name == args.actor) and (needle is None or needle in s.id.lower())
    ]
    if args.actor is not None and not declared and not app.cron.list(actor=args.actor, limit=1).items:
        raise Failure(f"no schedules of actor {args.actor!r} ({app.known_actors()})")
    out = _Listing(args, now_iso=iso(now))

    def add(schedules: Sequence[BoundSchedule], stored: Sequence[RuntimeSchedule | None]) -> None:
        report = read_health(app.cron.health_reads(), schedules, now_ms=now, policy=app.middleware.health_policy)
        health = {h.schedule_id: h.health for h in report.schedules}
        last = app.cron.decisions([s.id for s in schedules])
        out.add(
            [_listed(app, s, r, now, last, paused, args.next, health) for s, r in zip(schedules, stored, strict=True)]
        )

    add(declared, [None] * len(declared))
    shown, cursor, total = 0, None, None
    while args.limit is None or shown < args.limit:
        # Streamed a page at a time: any number of runtime schedules, in
        # memory one page at a time.
        wanted = _PAGE if args.limit is None else min(_PAGE, args.limit - shown)
        page = app.cron.list(actor=args.actor, search=args.search, cursor=cursor, limit=wanted)
        total = page.total if cursor is None else total
        add([r.schedule for r in page.items], page.items)
        shown += len(page.items)
        cursor = page.cursor
        if cursor is None:
            break
    out.close(runtime_total=total, more=None if cursor is None else (-1 if total is None else total - shown))
    return 0


def _listed(
    app: App,
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
    done = _done(s, decision.tick_ms if decision else None)
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
        "done": done,
        "health": health.get(s.id),
    }
    ended = "none (ended)" if s.at is None else f"done ({decision.outcome})" if done and decision else "none"
    pause_text = "yes" if end is None else f"until {when(end)} ({span(end - now)} left)"
    row = [
        s.actor_name,
        s.name if s.named else "-",
        s.source if record["declared"] else f"{s.source} (actor not declared)",
        s.expression,
        s.timezone,
        ", ".join(when(t, s.zone) for t in ticks) or ended,
        when(decision.tick_ms, s.zone) if decision else "-",
        decision.outcome if decision else "-",
        health.get(s.id, "-"),
        pause_text if is_paused else "no",
    ]
    return record, row


def _done(schedule: BoundSchedule, last_tick: int | None) -> bool | None:
    """For a one-shot, whether its tick was decided (None otherwise)."""
    if schedule.at is None:
        return None
    return last_tick is not None and last_tick >= schedule.at


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
        for record, cells in items:
            if self.json:
                sys.stdout.write(("," if self.count else "") + "\n  " + json.dumps(record))
            else:
                self.held.append(cells)
            self.count += 1
        if len(self.held) >= _PAGE:
            self._flush()
        sys.stdout.flush()

    def _flush(self) -> None:
        if not self.held:
            return
        self.widths = [max(w, *(len(r[i]) for r in self.held)) for i, w in enumerate(self.widths)]
        if self.count == len(self.held):  # the first rows: the header goes first
            print(row(_LIST_HEADERS, self.widths))
        for cells in self.held:
            print(row(cells, self.widths))
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


def status(app: App, args: argparse.Namespace) -> int:
    found = app.status()
    emit(args, found.to_json(), "\n".join(_status_lines(found)))
    return 0 if found.healthy else EXIT_NO_LEADER


# Each problem's label in ``status``'s text; None: the Leader and Status
# lines say it.
_PROBLEM_LABELS = {"no_leader": None, "stale_lease": None, "replicas_lacking": "Replicas:"}
_CANDIDATE_HEADERS = ["HOST", "PID", "CANDIDATE", "SCHEDULES", "VERSION", "LAST SEEN", "LEADER"]


def _status_lines(s: Status) -> list[str]:
    now, leader, listed = s.now_ms, s.leader, span(s.listed_ms)
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
    lines.append(f"Candidates: {len(s.candidates)} seen in the last {listed}")
    seen = [
        [c.host, c.pid, c.candidate_id, c.fingerprint or "-", c.version or "-", f"{span(now - c.seen_ms)} ago", mark]
        for c, mark in ((c, "yes" if s.is_leader(c) else "") for c in s.candidates)
    ]
    lines += [table(_CANDIDATE_HEADERS, seen)] if seen else []
    if s.ineligible:
        lines.append(f"Not eligible: {len(s.ineligible)} process(es) with lead=False seen in the last {listed}")
        rows = [[c.host, c.pid, c.candidate_id, span(now - c.seen_ms) + " ago"] for c in s.ineligible]
        lines.append(table(["HOST", "PID", "CANDIDATE", "LAST SEEN"], rows))
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


def check(app: App, args: argparse.Namespace) -> int:
    found = app.status()
    report = found.health.report
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
    text = table(["SCHEDULE", "HEALTH", "SINCE", "LAST RUN", "ERROR"], rows) if rows else "No cron schedules."
    unregistered = sum(h.health == "missed" and not h.registered for h in report.schedules)
    if unregistered:
        counts += (
            f"\n{unregistered} missed schedule(s) were never registered by any process: no worker of this app "
            "runs against this Redis and prefix, or every process has lead=False (see dramatiq-cron status)."
        )
    warnings = [line for p in found.problems if p.level for line in _problem_lines("Warning:", p)]
    text += (f"\n{counts}" if counts else "") + "".join(f"\n{line}" for line in warnings)
    if report.stored:
        stored = [[p.schedule_id, p.kind, p.detail] for p in report.stored]
        text += "\n\nStored runtime definitions:\n" + table(["SCHEDULE", "PROBLEM", "DETAIL"], stored)
    emit(args, {**report.to_json(), **status_sets_json(found)}, text)
    # Schedules of the app that does not lead never fire: at least a warning.
    return max(report.exit_code, found.check_level)


def runs(app: App, args: argparse.Namespace) -> int:
    schedule_id = app.target(args).schedule_id
    assert schedule_id is not None
    zone = app.zone_of(schedule_id)
    found = app.cron.runs(schedule_id, limit=args.limit)
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
        for r in found
    ]
    headers = ["TICK", "OUTCOME", "STARTED", "DURATION", "ATTEMPT", "HOST", "PID", "ERROR"]
    text = table(headers, rows) if rows else f"No runs of {schedule_id} recorded."
    emit(args, {"runs": [r.to_json() for r in found]}, text)
    return 0


def history(app: App, args: argparse.Namespace) -> int:
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
                raise Failure(f"unknown cron actor or schedule {args.actor!r}") from None
        match = {args.actor}
    records, rows = [], []
    for e in reversed(app.cron.history(limit=args.limit, match=match)):
        source, zone = source_of(e.schedule_id), app.zone_of(e.schedule_id)
        delay = None if e.lag_ms is None else "+" + span(e.lag_ms)
        records.append(
            {
                "at": iso(e.at_ms),
                "outcome": e.outcome,
                "source": source,
                "schedule": e.schedule_id,
                "actor": parse_id(e.schedule_id).actor if source == "runtime" else e.actor_name,
                "tick": iso(e.tick_ms, zone),
                "tick_ms": e.tick_ms,
                "delay_ms": e.lag_ms,
                "delay": delay,
                "epoch": e.epoch,
                "detail": e.detail,
                "message_id": e.message_id or None,
                "who": e.who or None,
            }
        )
        rows.append(
            [
                when(e.at_ms),
                e.outcome,
                source,
                e.schedule_id,
                # An operator action (pause, add...) has no tick of its own.
                "" if e.who and e.outcome != Outcome.TRIGGERED else when(e.tick_ms, zone),
                delay or "",
                "" if e.epoch is None else e.epoch,
                e.who,
                "" if e.detail.isdigit() else e.detail,  # a bare number is the delay, shown already
            ]
        )
    headers = ["WHEN", "OUTCOME", "SOURCE", "SCHEDULE", "TICK", "DELAY", "EPOCH", "BY", "DETAIL"]
    emit(args, {"entries": records}, table(headers, rows) if rows else "No history.")
    return 0
