"""The ``dramatiq-cron`` command: see and steer the scheduler of an app.

It loads the app the way ``dramatiq`` does (``module[:broker]``, with
``--path`` directories put on ``sys.path``), finds the broker's
:class:`~dramatiq_cron_middleware.CronMiddleware`, and acts through its
operator service and its connections to Redis.  Every command prints a
table, or JSON with ``--json``; every failure is one line on stderr and a
non-zero exit.  The command parses arguments (arguments.py) and renders
results (reads.py, actions.py); it holds no logic of its own.

Runtime schedules (added with ``CronMiddleware.add`` or ``dramatiq-cron
add``) are listed beside declared ones, each row saying its source.

Exit statuses: 0 success; 1 ``status`` found no leader renewing its lease,
or ``migrate crontab`` found the old lock still renewed (or did not delete it);
2 a usage or configuration error (bad module, no middleware, unknown
actor); 3 Redis could not be reached; 130 ``backfill`` interrupted.  ``check`` follows the
Nagios plugin convention: 0 every schedule ``ok``, ``pending`` or
``paused``, 1 one is ``late`` or ``running_long`` (or a stored runtime
definition reads differently now), 2 one is ``failing`` or ``missed`` (or a
stored runtime definition cannot be read), 3 Redis could not be reached.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import redis

from ...errors import CronError
from ...store.connection import credentials_refused, redact
from . import actions, reads
from .actions import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from .actions import runtime_record as runtime_record
from .actions import schedule_of as schedule_of
from .app import EXIT_ERROR, App, Failure, load
from .arguments import parser
from .reads import EXIT_NO_LEADER

__all__ = ["main", "run", "parser", "EXIT_OK", "EXIT_NO_LEADER", "EXIT_ERROR", "EXIT_UNREACHABLE"]

EXIT_OK = 0
#: Redis did not answer.
EXIT_UNREACHABLE = 3

_COMMANDS = {
    "list": reads.list_schedules,
    "status": reads.status,
    "history": reads.history,
    "check": reads.check,
    "runs": reads.runs,
    "trigger": actions.trigger,
    "pause": actions.pause,
    "resume": actions.pause,
    "add": actions.add,
    "backfill": actions.backfill,
    "remove": actions.remove,
    "migrate": actions.migrate,
    "web": actions.web,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dramatiq-cron``; returns the exit status."""
    args = parser().parse_args(argv)
    limit = "-n/--limit" if args.command == "history" else "--limit"
    for flag, value in (("--next", getattr(args, "next", None)), (limit, getattr(args, "limit", None))):
        if value is not None and value < 1:
            return _fail(f"{flag} must be at least 1, got {value}")
    app: App | None = None
    try:
        app = load(args.app, args.path or ["."])
        return _COMMANDS[args.command](app, args)
    except Failure as exc:
        return _fail(str(exc), exc.status)
    except redis.RedisError as exc:  # the one translation of Redis's failures for people
        where = app.where if app else "?"
        refused = credentials_refused(exc, where)
        if refused is not None:  # Redis answered: not unreachable
            return _fail(refused)
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            return _fail(f"cannot reach Redis at {where}: {redact(str(exc))}", EXIT_UNREACHABLE)
        return _fail(f"Redis error: {redact(f'{type(exc).__name__}: {exc}')}")
    except CronError as exc:  # what the service refused, in its words
        return _fail(redact(str(exc)))
    finally:
        if app is not None:
            app.connections.close()


def _fail(message: str, status: int = EXIT_ERROR) -> int:
    print(f"dramatiq-cron: error: {message}", file=sys.stderr)
    return status


def run() -> NoReturn:
    """``python -m dramatiq_cron_middleware``."""
    sys.exit(main())
