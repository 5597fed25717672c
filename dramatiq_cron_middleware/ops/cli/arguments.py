"""``dramatiq-cron``'s arguments, as one table: each command, its help and
its arguments (a tuple of flags and ``add_argument``'s options, or a
:class:`OneOf` group of mutually exclusive ones)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ...backfill import DEFAULT_MAX_TICKS
from ...service import CRONTAB_WATCH_MS

WHEN = "(ISO 8601 with offset, or epoch ms)"


@dataclasses.dataclass(frozen=True)
class OneOf:
    """Mutually exclusive arguments (one of them ``required`` or not)."""

    arguments: tuple[Any, ...]
    required: bool = True


def _one(*flags: str, **options: Any) -> tuple[Any, ...]:
    return (*flags, options)


_TARGET = _one(
    "target",
    nargs="?",
    metavar="TARGET",
    help="a schedule id, or the name of an actor that has one schedule (see list)",
)
_SCHEDULE = _one("--schedule", metavar="ID", help="exactly this schedule id (an unnamed schedule's is its actor)")
_WHOLE_ACTOR = _one("--actor", dest="whole_actor", metavar="ACTOR", help="every schedule of this actor")
_MS = {"type": int, "metavar": "MS"}
_N = {"type": int, "metavar": "N"}
_WHEN = {"metavar": "WHEN"}
_FLAG = {"action": "store_true"}

#: Each command's help.
HELP = {
    "list": "every schedule, its next fire times, last tick and whether it is paused",
    "status": "the current leader, the candidates, and whether the lease is being renewed",
    "history": "recent tick outcomes, oldest first",
    "check": "each schedule's health and the stored runtime definitions this version reads differently or not at "
    "all; exit 0 all ok, 1 late, running long or read differently, 2 failing, missed or unreadable",
    "runs": "a schedule's recent runs, newest first: outcome, start, duration, host, error",
    "trigger": "enqueue a schedule's message now, marked manual; the schedule is left as it is",
    "pause": "stop firing a schedule's (or, with --actor, every schedule of an actor's) ticks until resumed",
    "resume": "undo pause",
    "backfill": "enqueue each past tick of a schedule in [--from, --to) once, marked as a backfill",
    "add": "create or replace a runtime schedule of a declared actor (no deploy needed)",
    "remove": "remove a runtime schedule; it never fires again",
    "migrate": "what is left of the scheduler you came from: dramatiq-crontab's lock key, its holder and PTTL, "
    "watched for a renewal; exit 1 while an old scheduler still renews it (periodiq keeps no lock)",
    "web": "serve the web dashboard (binds 127.0.0.1:8080 unless --bind says otherwise)",
}

#: Each command's own arguments.
ARGUMENTS: dict[str, list[Any]] = {
    "list": [
        _one("--next", **_N, default=3, help="how many next fire times to show (default 3)"),
        _one("--actor", metavar="ACTOR", help="only this actor's schedules"),
        _one("--search", metavar="TEXT", help="only schedules whose id contains TEXT (ignoring case)"),
        _one("--limit", **_N, help="show at most N runtime schedules (default: all, streamed)"),
    ],
    "history": [
        _one("actor", nargs="?", metavar="ACTOR", help="only this actor (or schedule id)"),
        _one("--limit", "-n", **_N, default=20, help="how many entries (default 20)"),
    ],
    "runs": [
        OneOf((_TARGET, _SCHEDULE)),
        _one("--limit", "-n", **_N, default=20, help="how many runs (default 20)"),
    ],
    "trigger": [OneOf((_TARGET, _SCHEDULE))],
    "pause": [
        OneOf((_TARGET, _SCHEDULE, _WHOLE_ACTOR)),
        OneOf(
            (
                _one(
                    "--for", dest="pause_for", metavar="DURATION", help="resume by itself after this long (2h, 90m, 1d)"
                ),
                _one("--until", **_WHEN, help=f"resume by itself at this instant {WHEN}"),
            ),
            required=False,
        ),
    ],
    "resume": [OneOf((_TARGET, _SCHEDULE, _WHOLE_ACTOR))],
    "backfill": [
        OneOf(
            (
                _one("target", nargs="?", metavar="TARGET", help="a schedule id, or an actor that has one schedule"),
                _one("--schedule", metavar="ID", help="exactly this schedule id"),
            )
        ),
        _one("--from", dest="start", **_WHEN, help=f"first instant {WHEN}"),
        _one("--to", dest="end", **_WHEN, help="end of the range, exclusive"),
        _one("--include-fired", **_FLAG, help="also enqueue ticks that fired already"),
        _one("--dry-run", **_FLAG, help="list the ticks, enqueue nothing"),
        _one("--yes", **_FLAG, help="allow a range of more than --max ticks"),
        _one("--max", **_N, default=DEFAULT_MAX_TICKS, help="refuse more ticks than N (default 10000)"),
    ],
    "add": [
        _one("actor", metavar="ACTOR", help="the actor's name"),
        _one("expression", nargs="?", metavar="EXPRESSION", help="a cron expression (or use --every)"),
        _one("--name", required=True, help="its name among the actor's runtime schedules ([A-Za-z0-9_.-]{1,64})"),
        _one("--timezone", metavar="ZONE", help="IANA zone of the expression (default: the middleware's)"),
        _one("--args", metavar="JSON", help="the message's positional arguments, a JSON array"),
        _one("--kwargs", metavar="JSON", help="the message's keyword arguments, a JSON object"),
        _one("--every", **_MS, help="an interval in ms instead of an expression"),
        _one("--offset", **_MS, default=0, help="with --every: where in the interval (ms)"),
        _one("--start", **_WHEN, help="first instant it may fire: epoch ms or ISO 8601 with offset"),
        _one("--end", **_WHEN, help="instant from which it no longer fires (exclusive)"),
        _one(
            "--catch-up",
            choices=("each", "latest", "none"),
            help="missed ticks a new leader fires (default: the middleware's)",
        ),
        _one("--catch-up-window", **_MS, help="how far back missed ticks are caught up (ms)"),
        _one("--jitter", **_MS, default=0, help="up to MS of delay per message (default 0)"),
        _one("--max-age", **_MS, help="drop a message that waited longer than MS"),
        _one(
            "--overlap", choices=("allow", "skip"), default="allow", help="skip a tick while the previous run goes on"
        ),
        _one("--overlap-ttl", **_MS, help="with --overlap skip: the longest a run counts"),
        _one("--options", metavar="JSON", help="further message options, a JSON object"),
        _one("--create-only", **_FLAG, help="refuse (exit 2) if the schedule exists, instead of replacing it"),
        _one("--at", **_WHEN, help=f"a one-shot: fire once at this instant {WHEN}"),
        _one("--description", metavar="TEXT", help="what the schedule is for (up to 500 characters)"),
        _one("--grace", **_MS, help="late if a run has not started MS after its tick"),
        _one("--max-runtime", **_MS, help="running_long if a run takes longer than MS"),
        _one("--failure-threshold", **_N, help="failing after N failed runs in a row"),
    ],
    "remove": [
        _one("actor", metavar="ID|ACTOR", help="the schedule's id (actor:name), or its actor's name and NAME"),
        _one("name", nargs="?", metavar="NAME", help="the runtime schedule's name"),
    ],
    "migrate": [
        _one("peer", choices=("crontab", "periodiq"), help="the scheduler migrated from"),
        _one("--delete", **_FLAG, help="delete the lock if nobody renewed it while watched"),
        _one("--force", **_FLAG, help="with --delete: delete it even if renewed or not watched"),
        _one("--watch", **_MS, default=CRONTAB_WATCH_MS, help="how long to watch for a renewal (default 6000)"),
    ],
    "web": [
        _one("--bind", default="127.0.0.1:8080", metavar="HOST:PORT", help="where to listen"),
        OneOf(
            (
                _one(
                    "--auth", metavar="USER:PASSWORD", help="require HTTP basic auth (default: $DRAMATIQ_CRON_WEB_AUTH)"
                ),
                _one(
                    "--token",
                    metavar="TOKEN",
                    help="require this bearer token, or ?token= once (default: $DRAMATIQ_CRON_WEB_TOKEN)",
                ),
            ),
            required=False,
        ),
        _one("--read-only", **_FLAG, help="show everything, change nothing"),
        _one("--insecure-bind", **_FLAG, help="allow a non-loopback address without --auth or --token"),
        _one(
            "--allowed-host",
            action="append",
            metavar="HOST",
            help="a Host name it answers for besides the loopback names and the bound address "
            "(repeatable; '.example.com' for a domain and its subdomains)",
        ),
    ],
}

_COMMON = [
    _one("app", metavar="APP", help="the app's module, optionally module:broker (as for dramatiq)"),
    _one("--path", "-P", action="append", default=[], metavar="DIR", help="a directory to import the app from"),
]
_JSON = _one("--json", action="store_true", help="print JSON instead of a table")


class _Parser(argparse.ArgumentParser):
    """argparse, but ``--name=--`` gives ``"--"`` (Python 3.11's argparse
    drops a ``--`` value given with ``=`` and leaves ``[]``)."""

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if arg_strings == ["--"] and action.option_strings and action.nargs is None and action.type is None:
            return "--"
        return super()._get_values(action, arg_strings)


def parser() -> argparse.ArgumentParser:
    """The parser of ``dramatiq-cron``'s arguments."""
    parser = _Parser(
        prog="dramatiq-cron",
        description="See and steer the cron schedules of a dramatiq app.",
        epilog="Exit status: 0 ok, 1 no live leader (status) or the old lock still renewed (migrate), 2 error, "
        "3 Redis unreachable; "
        "check: 0 ok, 1 warning, 2 critical, 3 Redis unreachable.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help in HELP.items():
        sub = commands.add_parser(name, help=help, description=help)
        # A command that prints a result (not web) prints JSON with --json.
        for argument in [*_COMMON, *([] if name == "web" else [_JSON]), *ARGUMENTS.get(name, [])]:
            _add(sub, argument)
    return parser


def _add(where: Any, argument: Any) -> None:
    if isinstance(argument, OneOf):
        group = where.add_mutually_exclusive_group(required=argument.required)
        for each in argument.arguments:
            _add(group, each)
    else:
        *flags, options = argument
        where.add_argument(*flags, **options)
