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
actor); 3 Redis could not be reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import dramatiq
import redis

from ..errors import CronConfigurationError, CronError, CronScheduleError
from ..middleware import CronMiddleware, find_middleware
from ..schedules.schedule import NEVER, BoundSchedule, Schedule
from ..store.codes import Outcome
from ..store.connection import describe, redact, scheduler_clients
from ..store.runtime import RuntimeSchedule, RuntimeSchedules
from ..store.timing import Timing
from .control import (
    AmbiguousTarget,
    Control,
    HistoryEntry,
    Target,
    TriggerRefused,
    UnknownTarget,
    paused_by,
    resolve_target,
)
from .format import iso, span, when

__all__ = ["main", "EXIT_OK", "EXIT_NO_LEADER", "EXIT_ERROR", "EXIT_UNREACHABLE"]

EXIT_OK = 0
#: ``status``: no process renewed the lease within its length.
EXIT_NO_LEADER = 1
#: Bad module, no CronMiddleware on the broker, unknown actor, bad arguments.
EXIT_ERROR = 2
#: Redis did not answer.
EXIT_UNREACHABLE = 3

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
        paused = self.control.paused() if args.command == "resume" else ()
        try:
            return resolve_target(
                declared=self.schedules,
                runtime=self.runtime,
                name=args.target,
                schedule_id=args.schedule,
                actor=getattr(args, "whole_actor", None),
                paused=paused,
            )
        except UnknownTarget as exc:
            known = sorted({s.actor_name for s in self.schedules})
            raise _Failure(f"{exc} (cron actors: {', '.join(known) or 'none'})") from None
        except AmbiguousTarget as exc:
            choose = f"{exc}: choose one with --schedule ID"
            raise _Failure(choose + (f", or {whole_actor} with --actor {exc.actor}" if whole_actor else "")) from None

    @property
    def runtime(self) -> RuntimeSchedules:
        try:
            return self.middleware.runtime
        except CronError as exc:
            raise _Failure(redact(str(exc))) from None

    def declares(self, actor_name: str) -> bool:
        """Whether the loaded app declares the actor (a runtime schedule may
        outlive its actor's code)."""
        return actor_name in self.broker.actors

    def _runtime_by_id(self, schedule_id: str) -> list[BoundSchedule]:
        actor, _, name = schedule_id.partition(":")
        try:
            record = self.runtime.get(actor, name)
        except CronScheduleError:
            return []
        return [] if record is None else [record.schedule]


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
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _emit(args: argparse.Namespace, data: object, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(text)


# -- commands -------------------------------------------------------------


def _list(app: _App, args: argparse.Namespace) -> int:
    now = app.control.server_ms()
    last = app.control.last_decisions()
    paused = app.control.paused()
    page = app.runtime.list(limit=args.limit)
    schedules = [*app.schedules, *(r.schedule for r in page.items)]
    records = []
    upcoming_by_schedule = []
    for s in schedules:
        upcoming, tick = [], now
        for _ in range(args.next):
            tick = s.next_after(tick)
            if tick >= NEVER:  # past the schedule's end
                break
            upcoming.append(tick)
        upcoming_by_schedule.append(upcoming)
        decision = last.get(s.id)
        records.append(
            {
                "actor": s.actor_name,
                "source": s.source,
                "declared": app.declares(s.actor_name),
                "revision": s.revision if s.source == "runtime" else None,
                "schedule": s.id,
                "name": s.name,
                "expression": s.expression,
                "timezone": s.timezone,
                "queue": s.queue_name,
                "catch_up": s.catch_up,
                "overlap": s.overlap,
                "next": [iso(t, s.zone) for t in upcoming],
                "last_tick": iso(decision.tick_ms, s.zone) if decision else None,
                "last_outcome": decision.outcome if decision else None,
                "last_epoch": decision.epoch if decision else None,
                "paused": paused_by(s, paused) is not None,
            }
        )
    named = any(s.name != s.expression for s in schedules)
    headers = [
        "ACTOR",
        *(["NAME"] if named else []),
        "SOURCE",
        "EXPRESSION",
        "ZONE",
        "NEXT",
        "LAST TICK",
        "OUTCOME",
        "PAUSED",
    ]
    rows = []
    for s, upcoming_ms in zip(schedules, upcoming_by_schedule, strict=True):
        decision = last.get(s.id)
        rows.append(
            [
                s.actor_name,
                *([s.name] if named else []),
                s.source if app.declares(s.actor_name) else f"{s.source} (actor not declared)",
                s.expression,
                s.timezone,
                ", ".join(when(t, s.zone) for t in upcoming_ms) or "none (ended)",
                when(decision.tick_ms, s.zone) if decision else "-",
                decision.outcome if decision else "-",
                "yes" if paused_by(s, paused) is not None else "no",
            ]
        )
    text = _table(headers, rows) if rows else "No cron schedules."
    if page.cursor is not None:
        text += f"\n... and {(page.total or 0) - len(page.items)} more runtime schedules (see --limit)."
    data = {"now": iso(now), "schedules": records, "runtime_total": page.total}
    _emit(args, data, text)
    return EXIT_OK


def _status(app: _App, args: argparse.Namespace) -> int:
    sent = time.monotonic()
    now = app.control.server_ms()
    ping_ms = (time.monotonic() - sent) * 1000
    leader = app.control.leader()
    ttl = leader.ttl_ms if leader else app.middleware.lock_ttl
    listed_ms = Timing.for_lease(ttl).candidate_listed_ms
    candidates = app.control.candidates(since_ms=now - listed_ms)
    healthy = leader is not None and now - leader.renewed_ms <= leader.ttl_ms
    data: dict[str, Any] = {
        "redis": {"url": app.where, "reachable": True, "round_trip_ms": round(ping_ms, 2)},
        "now": iso(now),
        "healthy": healthy,
        "leader": None,
        "candidates": [
            {
                "host": c.host,
                "pid": c.pid,
                "candidate": c.candidate_id,
                "last_seen": iso(c.seen_ms),
                "leader": leader is not None and c.candidate_id == leader.candidate.rsplit("|", 1)[-1],
                "fingerprint": c.fingerprint,
                "version": c.version,
            }
            for c in candidates
        ],
    }
    lines = [f"Redis:      {app.where} reachable ({ping_ms:.1f} ms round trip)"]
    if leader is None:
        lines.append(f"Leader:     none (no process holds the lease; lease length {span(ttl)})")
    else:
        data["leader"] = {
            "host": leader.host,
            "pid": leader.pid,
            "epoch": leader.epoch,
            "since": iso(leader.since_ms),
            "renewed": iso(leader.renewed_ms),
            "lease_ms": leader.ttl_ms,
            "remaining_ms": leader.remaining_ms,
        }
        lines += [
            f"Leader:     {leader.host} pid {leader.pid}, epoch {leader.epoch}",
            f"Since:      {when(leader.since_ms)} ({span(now - leader.since_ms)} ago)",
            f"Lease:      renewed {span(now - leader.renewed_ms)} ago, "
            f"{span(leader.remaining_ms)} of {span(leader.ttl_ms)} left",
        ]
    rows = [
        [
            c["host"],
            c["pid"],
            c["candidate"],
            c["fingerprint"] or "-",
            c["version"] or "-",
            span(now - c_ms) + " ago",
            "yes" if c["leader"] else "",
        ]
        for c, c_ms in zip(data["candidates"], (c.seen_ms for c in candidates), strict=True)
    ]
    lines.append(f"Candidates: {len(candidates)} seen in the last {span(listed_ms)}")
    if rows:
        lines.append(_table(["HOST", "PID", "CANDIDATE", "SCHEDULES", "VERSION", "LAST SEEN", "LEADER"], rows))
    sets = {c.fingerprint for c in candidates if c.fingerprint}
    data["mixed_schedule_sets"] = len(sets) > 1
    if len(sets) > 1:
        versions = {c.version for c in candidates if c.fingerprint}
        why = "a rolling deploy?" if len(versions) > 1 else "two apps sharing the prefix?"
        lines.append(f"Warning:    candidates declare {len(sets)} different schedule sets ({why})")
    by_actor = app.runtime.count_by_actor()
    undeclared = {a: n for a, n in by_actor.items() if not app.declares(a)}
    data["runtime"] = {"total": sum(by_actor.values()), "by_actor": by_actor, "undeclared": undeclared}
    line = f"Runtime:    {sum(by_actor.values())} runtime schedule(s) for {len(by_actor)} actor(s)"
    if undeclared:
        line += "; actors this app does not declare: " + ", ".join(f"{a} ({n})" for a, n in sorted(undeclared.items()))
    lines.append(line)
    lacking = app.control.replicas_lacking()
    data["replicas_lacking"] = None
    if lacking is not None:
        data["replicas_lacking"] = {
            "host": lacking.host,
            "pid": lacking.pid,
            "acked": lacking.acked,
            "required": lacking.required,
            "since": iso(lacking.since_ms),
        }
        lines.append(f"Replicas:   {lacking.describe(now)}")
    if not healthy:
        lines.append("Status:     NO LEADER - no process renewed the lease within its length")
    _emit(args, data, "\n".join(lines))
    return EXIT_OK if healthy else EXIT_NO_LEADER


def _history(app: _App, args: argparse.Namespace) -> int:
    match = None
    if args.actor:
        # History is read, not acted on: an actor name shows all of its
        # schedules (entries match by actor), a schedule id that one only.
        try:
            resolve_target(declared=app.schedules, runtime=app.runtime, actor=args.actor)
        except UnknownTarget:
            try:
                resolve_target(declared=app.schedules, runtime=app.runtime, schedule_id=args.actor)
            except UnknownTarget:
                raise _Failure(f"unknown cron actor or schedule {args.actor!r}") from None
        match = {args.actor}
    entries = list(reversed(app.control.history(limit=args.limit, match=match)))
    records = [_history_record(app, e) for e in entries]
    rows = [
        [
            when(e.at_ms),
            e.outcome,
            _source_of(e.schedule_id),
            e.schedule_id,
            when(e.tick_ms, app.zone_of(e.schedule_id)),
            r["delay"] or "",
            "" if e.epoch is None else e.epoch,
            "" if e.detail.isdigit() else e.detail,  # a bare number is the delay, shown already
        ]
        for e, r in zip(entries, records, strict=True)
    ]
    headers = ["WHEN", "OUTCOME", "SOURCE", "SCHEDULE", "TICK", "DELAY", "EPOCH", "DETAIL"]
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
        "actor": e.schedule_id.split(":", 1)[0] if _source_of(e.schedule_id) == "runtime" else e.actor_name,
        "tick": iso(e.tick_ms, app.zone_of(e.schedule_id)),
        "tick_ms": e.tick_ms,
        "delay_ms": delay_ms,
        "delay": None if delay_ms is None else "+" + span(delay_ms),
        "epoch": e.epoch,
        "detail": e.detail,
        "message_id": e.message_id or None,
    }


def _trigger(app: _App, args: argparse.Namespace) -> int:
    target = app.target(args)
    schedule = target.schedule
    assert schedule is not None  # trigger has no --actor
    try:
        done = app.control.trigger(app.broker, schedule, prefix=app.middleware.prefix)
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
    if args.command == "pause":
        changed = app.control.pause(target)
        text = (
            f"Paused {target}: whichever process leads records its ticks as paused and enqueues nothing."
            if changed
            else f"{target} was already paused."
        )
    else:
        changed = app.control.resume(target)
        text = f"Resumed {target}: its next tick fires." if changed else f"{target} was not paused."
        blocker = None if changed or target.schedule is None else paused_by(target.schedule, app.control.paused())
        if blocker is not None and blocker.schedule_id is None:
            text += f" Its actor is paused as a whole: resume it with --actor {target.actor_name}."
    data = {
        "target": target.member,
        "actor": target.actor_name,
        "schedule": target.schedule_id,
        "changed": changed,
        "paused": sorted(app.control.paused()),
    }
    _emit(args, data, text)
    return EXIT_OK


def _web(app: _App, args: argparse.Namespace) -> int:
    from ..web import CronDashboard
    from ..web.security import LOOPBACK_HOSTS
    from ..web.server import Unsafe, is_loopback, parse_bind, start

    try:
        host, port = parse_bind(args.bind)
    except ValueError as exc:
        raise _Failure(str(exc)) from None
    auth = None
    if args.auth is not None:
        user, sep, password = args.auth.partition(":")
        if not sep or not user or not password:
            raise _Failure("--auth wants USER:PASSWORD")
        auth = (user, password)
    # Answer for this machine's loopback names, the bound address, and the
    # names the operator reaches it by.
    hosts = [*LOOPBACK_HOSTS, *(args.allowed_host or [])]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        hosts.append(f"[{host}]" if ":" in host else host)
    authenticated = bool(auth or args.token)
    try:
        dashboard = CronDashboard(
            app.broker,
            prefix="",
            read_only=args.read_only,
            auth=auth,
            token=args.token,
            # start() below refuses a non-loopback bind without credentials
            # unless --insecure-bind says a proxy in front authenticates.
            unauthenticated=not authenticated,
            allowed_hosts=hosts,
        )
    except CronConfigurationError as exc:  # the web extra is missing
        raise _Failure(str(exc)) from None
    try:
        server = start(dashboard, host, port, authenticated=authenticated, insecure=args.insecure_bind)
    except Unsafe as exc:
        raise _Failure(str(exc)) from None
    except OSError as exc:
        raise _Failure(f"cannot listen on {args.bind}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    mode = " (read-only)" if args.read_only else ""
    print(
        f"Serving the cron dashboard{mode} on http://{shown}:{server.server_port}/ for the hosts "
        f"{', '.join(hosts)} (Ctrl+C stops it)",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        dashboard.control.client.close()
    return EXIT_OK


def _source_of(schedule_id: str) -> str:
    """``code`` or ``runtime``: declared ids are ``actor`` or ``actor/name``
    (actor names contain no ``:``), runtime ids ``actor:name``."""
    return "runtime" if ":" in schedule_id.split("/", 1)[0] else "code"


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


def _instant_option(flag: str, text: str | None) -> int | dt.datetime | None:
    """Epoch milliseconds, or an ISO 8601 time with its offset."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _Failure(f"{flag} must be epoch milliseconds or an ISO 8601 time with offset, got {text!r}") from None


def _add(app: _App, args: argparse.Namespace) -> int:
    if (args.expression is None) == (args.every is None):
        raise _Failure("give either a cron EXPRESSION or --every MS (not both)")
    schedule = Schedule(
        args.expression,
        timezone=args.timezone,
        args=tuple(_json_option("--args", args.args, list)),
        kwargs=_json_option("--kwargs", args.kwargs, dict),
        every=args.every,
        offset=args.offset,
        start=_instant_option("--start", args.start),
        end=_instant_option("--end", args.end),
    )
    try:
        stored = app.middleware.add(args.actor, schedule, name=args.name)
    except CronScheduleError as exc:
        raise _Failure(str(exc)) from None
    except CronConfigurationError as exc:
        raise _Failure(redact(str(exc))) from None
    _emit(args, _runtime_record(stored), _added_text(stored))
    return EXIT_OK


def _runtime_record(stored: RuntimeSchedule) -> dict[str, Any]:
    s = stored.schedule
    return {
        "schedule": s.id,
        "actor": s.actor_name,
        "name": s.name,
        "source": s.source,
        "revision": s.revision,
        "expression": s.expression,
        "every": s.every,
        "offset": s.offset,
        "timezone": s.timezone,
        "queue": s.queue_name,
        "args": list(s.args),
        "kwargs": s.kwargs,
        "start": None if s.start is None else iso(s.start, s.zone),
        "end": None if s.end is None else iso(s.end, s.zone),
        "created": iso(stored.created_ms),
        "updated": iso(stored.updated_ms),
        "next": None if stored.next_ms is None else iso(stored.next_ms, s.zone),
    }


def _added_text(stored: RuntimeSchedule) -> str:
    s = stored.schedule
    upcoming = "no tick follows (past its end)" if stored.next_ms is None else f"next {when(stored.next_ms, s.zone)}"
    return f"Stored runtime schedule {s.id} (revision {s.revision}): {s.expression} in {s.timezone}, {upcoming}."


def _remove(app: _App, args: argparse.Namespace) -> int:
    try:
        removed = app.middleware.remove(args.actor, args.name)
    except CronScheduleError as exc:
        raise _Failure(str(exc)) from None
    except CronConfigurationError as exc:
        raise _Failure(redact(str(exc))) from None
    schedule_id = f"{args.actor}:{args.name}"
    text = (
        f"Removed runtime schedule {schedule_id}: it fires no more."
        if removed
        else f"There was no runtime schedule {schedule_id}."
    )
    _emit(args, {"schedule": schedule_id, "removed": removed}, text)
    return EXIT_OK


# -- entry point ----------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dramatiq-cron",
        description="See and steer the cron schedules of a dramatiq app.",
        epilog="Exit status: 0 ok, 1 no live leader (status), 2 error, 3 Redis unreachable.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument("app", metavar="APP", help="the app's module, optionally module:broker (as for dramatiq)")
        sub.add_argument(
            "--path", "-P", action="append", default=[], metavar="DIR", help="a directory to import the app from"
        )
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
        return sub

    sub = command("list", "every schedule, its next fire times, last tick and whether it is paused")
    sub.add_argument("--next", type=int, default=3, metavar="N", help="how many next fire times to show (default 3)")
    sub.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="show at most N runtime schedules (default 1000)"
    )
    command("status", "the current leader, the candidates, and whether the lease is being renewed")
    sub = command("history", "recent tick outcomes, oldest first")
    sub.add_argument("actor", nargs="?", metavar="ACTOR", help="only this actor (or schedule id)")
    sub.add_argument("--limit", "-n", type=int, default=20, metavar="N", help="how many entries (default 20)")
    for name, help in (
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
        if name != "trigger":
            which.add_argument("--actor", dest="whole_actor", metavar="ACTOR", help="every schedule of this actor")
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
    sub = command("remove", "remove a runtime schedule; it never fires again")
    sub.add_argument("actor", metavar="ACTOR", help="the actor's name")
    sub.add_argument("name", metavar="NAME", help="the runtime schedule's name")
    sub = command("web", "serve the web dashboard (binds 127.0.0.1:8080 unless --bind says otherwise)")
    sub.add_argument("--bind", default="127.0.0.1:8080", metavar="HOST:PORT", help="where to listen")
    who = sub.add_mutually_exclusive_group()
    who.add_argument("--auth", metavar="USER:PASSWORD", help="require HTTP basic auth")
    who.add_argument("--token", metavar="TOKEN", help="require this bearer token (or ?token= once)")
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
    "trigger": _trigger,
    "pause": _pause,
    "resume": _pause,
    "add": _add,
    "remove": _remove,
    "web": _web,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dramatiq-cron``; returns the exit status."""
    args = _parser().parse_args(argv)
    if getattr(args, "next", 1) < 1 or getattr(args, "limit", 1) < 1:
        return _fail("--next and --limit must be at least 1")
    app: _App | None = None
    try:
        app = _load(args.app, args.path or ["."])
        return _COMMANDS[args.command](app, args)
    except _Failure as exc:
        return _fail(str(exc), exc.status)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        where = app.where if app else "?"
        return _fail(f"cannot reach Redis at {where}: {redact(str(exc))}", EXIT_UNREACHABLE)
    except redis.RedisError as exc:
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
