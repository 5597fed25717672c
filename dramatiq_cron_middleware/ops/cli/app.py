"""The app a ``dramatiq-cron`` command acts on, and what every command
shares: the one failure, the one way to print a result (a table or, with
``--json``, its JSON document) and the readings of option values."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import dramatiq

from ...errors import CronConfigurationError
from ...middleware import CronMiddleware, find_middleware
from ...schedules.ids import parse_id
from ...schedules.instants import instant_ms
from ...service import Cron
from ...status import Status
from ...store.connection import Connections, redact
from ...targets import AmbiguousTarget, Target, UnknownTarget
from ..django_project import setup_from_environment

#: Bad module, no CronMiddleware on the broker, unknown actor, bad arguments.
EXIT_ERROR = 2


class Failure(Exception):
    """A failure reported as one line on stderr."""

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class App:
    """The loaded app: its broker and middleware, and the middleware's
    operator connection to its Redis (``Connections.operator``)."""

    broker: dramatiq.Broker
    middleware: CronMiddleware
    connections: Connections

    @property
    def cron(self) -> Cron:
        """The operator service (service.py) of the loaded broker (also
        of an app that declares no actor)."""
        return self.middleware.parts(self.broker).service()

    @property
    def where(self) -> str:
        return self.cron.where

    def zone_of(self, schedule_id: str) -> dt.tzinfo:
        found = None if source_of(schedule_id) == "actor" else self.cron.find(schedule_id)
        return dt.timezone.utc if found is None else found.zone

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
            raise Failure(f"{exc} ({self.known_actors()})") from None
        except AmbiguousTarget as exc:
            choose = f"{exc}: choose one with --schedule ID"
            raise Failure(choose + (f", or {whole_actor} with --actor {exc.actor}" if whole_actor else "")) from None

    def known_actors(self) -> str:
        """The hint after an unknown name: the actors with schedules,
        declared or runtime (those with only runtime schedules too)."""
        declared = sorted({s.actor_name for s in self.middleware.all_schedules()})
        runtime_only = sorted(set(self.cron.count_by_actor()) - set(declared))
        text = f"cron actors: {', '.join(declared) or 'none'}"
        return text + (f"; with runtime schedules only: {', '.join(runtime_only)}" if runtime_only else "")

    def declares(self, actor_name: str) -> bool:
        """Whether the loaded app declares the actor (a runtime schedule may
        outlive its actor's code)."""
        return actor_name in self.broker.actors

    def status(self) -> Status:
        return self.cron.status(self.middleware, declares=self.declares)


def load(spec: str, paths: Sequence[str]) -> App:
    """The app ``spec`` names (``module[:broker]``), imported from ``paths``."""
    for path in reversed(paths):
        sys.path.insert(0, path)
    broker = _import_broker(spec)
    try:
        middleware = find_middleware(broker, needed_by=f"the app {spec!r}")
        connections = middleware.connections(broker)
        connections.operator()  # a source that cannot be used fails here
    except Exception as exc:
        raise Failure(redact(str(exc))) from None
    return App(broker=broker, middleware=middleware, connections=connections)


def _import_broker(spec: str) -> dramatiq.Broker:
    module_name, _, attribute = spec.partition(":")
    try:
        setup_from_environment()  # a Django project: django.setup() first, as rundramatiq does
    except CronConfigurationError as exc:
        raise Failure(redact(str(exc))) from None
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
        raise Failure(f"cannot load {spec!r}: {redact(f'{type(exc).__name__}: {exc}')}") from None
    if not isinstance(value, dramatiq.Broker):
        raise Failure(f"cannot load {spec!r}: {attribute!r} is not a dramatiq Broker")
    return value


def emit(args: argparse.Namespace, data: object, text: str) -> None:
    """A command's result: ``text``, or with ``--json`` the document ``data``."""
    print(json.dumps(data, indent=2, sort_keys=False) if args.json else text)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(row(cells_, widths) for cells_ in cells)


def row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def source_of(schedule_id: str) -> str:
    """``code`` or ``runtime``: declared ids are ``actor`` or ``actor/name``
    (actor names contain no ``:``), runtime ids ``actor:name``; ``actor``
    for an action on a whole actor (``actor:*``)."""
    if schedule_id.endswith(":*"):
        return "actor"
    return "runtime" if parse_id(schedule_id).runtime else "code"


def json_option(flag: str, text: str | None, kind: type) -> Any:
    """A JSON array or object given to ``flag`` (empty when not given)."""
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Failure(f"{flag} is not JSON ({exc}): {text!r}") from None
    if not isinstance(value, kind):
        raise Failure(f"{flag} must be a JSON {'array' if kind is list else 'object'}, got {text!r}")
    return value


def instant_option(flag: str, text: str | None) -> int | None:
    """Epoch milliseconds (ASCII digits), or an ISO 8601 time with its offset."""
    try:
        return None if text is None else instant_ms(text)
    except ValueError as exc:
        raise Failure(f"{flag}: {exc}") from None
