"""The commands that act: ``trigger``, ``pause``/``resume``, ``add``,
``remove``, ``backfill``, ``migrate`` and ``web``, each one call of the service (as
``who="cli"``) and the rendering of what it returns."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

import redis
from dramatiq.brokers.stub import StubBroker

from ...errors import CronError, CronScheduleError
from ...schedules.ids import format_id
from ...schedules.schedule import BoundSchedule, Schedule, of_actor
from ...store.connection import redact
from ...store.runtime import RuntimeSchedule, split_id
from ...store.runtime_definition import definition_of
from ...targets import paused_by
from ...times import iso, span, when
from .app import App, Failure, emit, instant_option, json_option

#: ``backfill`` was interrupted (Ctrl+C); running it again continues.
EXIT_INTERRUPTED = 130


def trigger(app: App, args: argparse.Namespace) -> int:
    target = app.target(args)
    schedule = target.schedule
    assert schedule is not None  # trigger has no --actor
    done = app.cron.trigger(target=target, who="cli")
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
    emit(args, data, text)
    return 0


def pause(app: App, args: argparse.Namespace) -> int:
    """``pause`` and ``resume``."""
    target = app.target(args, whole_actor=f"{args.command} all of them")
    cron = app.cron
    if args.command == "pause":
        done = cron.pause(target=target, until=args.until, duration=args.pause_for, who="cli")
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
    emit(args, data, text)
    return 0


def backfill(app: App, args: argparse.Namespace) -> int:
    if args.start is None or args.end is None:
        raise Failure(
            "backfill needs --from and --to (an open range cannot be backfilled), "
            f"got --from {args.start!r} --to {args.end!r}"
        )
    if args.max < 1:
        raise Failure(f"--max must be at least 1, got {args.max}")
    target = app.target(args)
    schedule = target.schedule
    assert schedule is not None  # backfill has no --actor
    if isinstance(app.broker, StubBroker) and not args.dry_run:
        raise Failure("the app's broker is a StubBroker: backfilled messages would only live in this process")
    cron, zone = app.cron, schedule.zone
    plan = cron.backfill_plan(
        target,
        start=instant_option("--from", args.start),
        end=instant_option("--to", args.end),
        include_fired=args.include_fired,
        max_ticks=None if args.yes else args.max,
    )
    if args.dry_run:
        plan = cron.backfill_listed(plan)
        heading = f"Would backfill {len(plan.ticks)} tick(s) of {schedule.id} ({_left_out(plan, plan)}):"
        emit(
            args, _backfill_data(schedule, plan, args, plan), "\n".join([heading, *(when(t, zone) for t in plan.ticks)])
        )
        return 0
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
        raise Failure(
            "interrupted: run the same command again to enqueue the rest (no tick is enqueued twice)", EXIT_INTERRUPTED
        ) from None
    except (redis.RedisError, CronError):
        raise
    except Exception as exc:  # the broker's enqueue (or a middleware hook) failed: one line, no traceback
        detail = redact(f"{type(exc).__name__}: {exc}")
        raise Failure(
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
    emit(args, data, text)
    return 0


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
            **{kind: [iso(t, zone) for t in getattr(left, kind)] for kind in ("fired", "unconfirmed", "unknown")},
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


def web(app: App, args: argparse.Namespace) -> int:
    from ...web.server import serve

    options = {"read_only": args.read_only, "insecure": args.insecure_bind, "allowed_hosts": args.allowed_host or []}
    try:
        serve(app.broker, bind=args.bind, auth=args.auth, token=args.token, **options)
    except ValueError as exc:
        raise Failure(str(exc)) from None
    return 0


def schedule_of(args: argparse.Namespace) -> Schedule:
    """The :class:`Schedule` that ``add``'s arguments describe."""
    if [args.expression, args.every, args.at].count(None) != 2:
        raise Failure("give one of a cron EXPRESSION, --every MS or --at WHEN (not both, not none)")
    with of_actor(args.actor):
        return Schedule(
            args.expression,
            timezone=args.timezone,
            args=tuple(json_option("--args", args.args, list)),
            kwargs=json_option("--kwargs", args.kwargs, dict),
            options=json_option("--options", args.options, dict),
            start=instant_option("--start", args.start),
            end=instant_option("--end", args.end),
            at=instant_option("--at", args.at),
            **{name: getattr(args, name) for name in _ADD_OPTIONS},
        )


# ``add``'s options given to ``Schedule`` as they are.
_ADD_OPTIONS = (
    "catch_up",
    "catch_up_window",
    "jitter",
    "max_age",
    "overlap",
    "overlap_ttl",
    "every",
    "offset",
    "description",
    "grace",
    "max_runtime",
    "failure_threshold",
)


def add(app: App, args: argparse.Namespace) -> int:
    schedule = schedule_of(args)
    try:
        stored = app.cron.add(args.actor, schedule, name=args.name, replace=not args.create_only, who="cli")
    except CronScheduleError as exc:
        message = str(exc)  # an undeclared actor: with the actors there are
        raise Failure(
            f"{message} ({app.known_actors()})" if "is not declared on the broker" in message else message
        ) from None
    s = stored.schedule
    upcoming = "no tick follows (past its end)" if stored.next_ms is None else f"next {when(stored.next_ms, s.zone)}"
    text = f"Stored runtime schedule {s.id} (revision {stored.revision}): {s.expression} in {s.timezone}, {upcoming}."
    emit(args, runtime_record(stored), text)
    return 0


def runtime_record(stored: RuntimeSchedule) -> dict[str, Any]:
    """``add --json``: the stored definition, its instants in ISO 8601 (a
    one-shot's ``at`` only)."""
    s = stored.schedule
    record = {"schedule": s.id, **definition_of(s), "source": s.source, "revision": stored.revision}
    del record["v"]
    for bound in ("start", "end", "at"):
        shown = record[bound] is not None and (bound == "at" or s.at is None)
        record[bound] = iso(record[bound], s.zone) if shown else None
    return {
        **record,
        "expression": s.expression,
        "created": iso(stored.created_ms),
        "updated": iso(stored.updated_ms),
        "next": None if stored.next_ms is None else iso(stored.next_ms, s.zone),
    }


def remove(app: App, args: argparse.Namespace) -> int:
    actor, name = split_id(args.actor) if args.name is None else (args.actor, args.name)
    removed = app.cron.remove(actor, name, who="cli")
    schedule_id = format_id(actor, name, runtime=True)
    if not removed and not app.declares(actor) and actor not in app.cron.count_by_actor():
        raise Failure(f"unknown actor {actor!r} ({app.known_actors()})")
    text = (
        f"Removed runtime schedule {schedule_id}: it fires no more."
        if removed
        else f"There was no runtime schedule {schedule_id} (nothing to remove)."
    )
    emit(args, {"schedule": schedule_id, "removed": removed}, text)
    return 0


#: ``migrate``: an old scheduler still renews its lock (or the delete was refused).
EXIT_STILL_RUNS = 1


def migrate(app: App, args: argparse.Namespace) -> int:
    """What is left of the scheduler migrated from: periodiq keeps no lock;
    dramatiq-crontab's lock key, watched for a renewal, deleted on request."""
    if args.peer == "periodiq":
        text = "periodiq keeps no lock in Redis: nothing to clear. Stop its `periodiq` process."
        emit(args, {"from": "periodiq", "key": None}, text)
        return 0
    lock = app.cron.crontab_lock(delete=args.delete, force=args.force, watch_ms=args.watch)
    data = {"from": "crontab", "where": app.where, **dataclasses.asdict(lock)}
    key = f"dramatiq-crontab's lock {lock.key!r} on {app.where}"
    if lock.holder is None:
        emit(args, data, f"{key}: gone, nothing to clear.")
        return 0
    expiry = "no expiry" if lock.pttl_ms < 0 else f"expires in {lock.pttl_ms} ms"
    said = f"{key}: held by token {lock.holder[:64]!r}, {expiry}; "
    if lock.deleted:
        said += "deleted."
    elif lock.renewed:
        said += f"renewed within {args.watch} ms: a `manage.py crontab` process still runs; stop it first."
    elif lock.renewed is None:
        said += "not watched for a renewal: make sure no `manage.py crontab` runs, then --delete --force it."
    elif args.delete:
        said += "it changed while being deleted (renewed?); run again."
    else:
        said += f"not renewed in {args.watch} ms: a leftover that expires by itself (or --delete it now)."
    emit(args, data, said)
    return 0 if lock.deleted or not (lock.renewed or args.delete) else EXIT_STILL_RUNS
