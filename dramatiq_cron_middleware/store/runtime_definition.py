"""Runtime schedules' values and their stored form (format 1): the
definition JSON written, read back and bound by the same rules as
``cron=``, shared by the Redis store (:mod:`.runtime`, :mod:`.runtime_reads`)
and the memory store (:mod:`.memory.runtime`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import inspect
import json
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import CronScheduleError, shown
from ..schedules.cadence import cadence
from ..schedules.expression import SEMANTICS
from ..schedules.ids import check_runtime_actor, runtime_id
from ..schedules.instants import UTC
from ..schedules.schedule import (
    DEFAULT_TIME_LIMIT,
    NAME_PATTERN,
    NEVER,
    BoundSchedule,
    Schedule,
    bind_schedule,
    check_bounds,
    check_description,
    interval_label,
    of_actor,
    parse_timezone,
    uses_hash,
)

__all__ = [
    "ActorInfo",
    "FORMAT",
    "MAX_DEFINITION_BYTES",
    "RuntimePage",
    "RuntimeSchedule",
    "SCHEDULE_FIELDS",
    "StoredProblem",
    "actor_name_of",
    "already_exists",
    "as_schedule",
    "bind_definition",
    "bind_fully",
    "changed_schedule",
    "check_listing",
    "definition_of",
    "describe_actor",
    "describe_changes",
    "describe_problems",
    "read_definition",
    "schedule_id_of",
    "stored_schedule",
]


_decode: Callable[[str], Any]
try:  # faster than the stdlib decoder, and a takeover decodes every definition
    from orjson import loads as _decode
except ImportError:  # pragma: no cover - PyPy, or installed without it
    _decode = json.loads


#: The definition format written (the ``"v"`` field).  A definition of
#: another format is skipped with a WARNING, never guessed at.
FORMAT = 1

#: The largest definition accepted, in bytes of JSON (args, kwargs and
#: options included).  Definitions are read on every leader takeover, so
#: they are meant to be small: pass a tenant id, not the tenant.
MAX_DEFINITION_BYTES = 65_536


@dataclasses.dataclass(frozen=True)
class ActorInfo:
    """What a runtime schedule needs to know of its actor at the call."""

    actor_name: str
    queue_name: str
    #: The actor's time limit in ms, for the default overlap guard expiry.
    time_limit: int = DEFAULT_TIME_LIMIT
    #: The actor function's signature, which args/kwargs must fit; None
    #: when it cannot be read (then they are not checked).
    signature: inspect.Signature | None = None


@dataclasses.dataclass(frozen=True)
class RuntimeSchedule:
    """A runtime schedule as stored in Redis.

    ``schedule`` is what the leader fires (``source="runtime"``);
    ``created_ms``/``updated_ms`` are Redis server times (``created_at``,
    ``updated_at`` as datetimes), ``as_of_ms`` the server time of the call
    that returned it, and ``revision`` counts this schedule's writes.
    """

    schedule: BoundSchedule
    created_ms: int
    updated_ms: int
    #: Not compared: two reads of one stored schedule are equal.
    as_of_ms: int = dataclasses.field(compare=False)
    #: The schedule's own count of writes: 1 when created (also when added
    #: again after a removal), one more at each replacement or update.
    #: (``schedule.revision`` is the fencing revision the leader's claims
    #: check, a counter shared by all runtime schedules.)
    revision: int = 1

    @functools.cached_property
    def next_ms(self) -> int | None:
        """The first tick after ``as_of_ms``, or None when no tick follows
        (past the schedule's ``end``).  Computed when first read: a bulk
        add of many schedules need not walk every expression."""
        upcoming = self.schedule.next_after(self.as_of_ms)
        return None if upcoming >= NEVER else upcoming

    @property
    def id(self) -> str:
        """``actor:name``, the schedule's identity in the ledger."""
        return self.schedule.id

    @property
    def actor_name(self) -> str:
        """The actor the schedule fires."""
        return self.schedule.actor_name

    @property
    def name(self) -> str:
        """The schedule's name among its actor's runtime schedules."""
        return self.schedule.name

    @property
    def next_at(self) -> dt.datetime | None:
        """:attr:`next_ms` as an aware datetime in the schedule's zone, or None."""
        upcoming = self.next_ms
        return None if upcoming is None else _datetime(upcoming, self.schedule.zone)

    @property
    def created_at(self) -> dt.datetime:
        """``created_ms`` as an aware UTC datetime."""
        return _datetime(self.created_ms, UTC)

    @property
    def updated_at(self) -> dt.datetime:
        """``updated_ms`` as an aware UTC datetime."""
        return _datetime(self.updated_ms, UTC)


@dataclasses.dataclass(frozen=True)
class RuntimePage:
    """One page of :meth:`RuntimeSchedules.list`.

    ``cursor`` continues the listing (pass it back as ``cursor=``), None
    on the last page; ``total`` is how many schedules match the ``actor``
    filter (None when ``search`` is given: counting would read them all).
    """

    items: list[RuntimeSchedule]
    cursor: str | None
    total: int | None


def read_definition(schedule_id: str, text: str) -> tuple[BoundSchedule, object]:
    """A stored definition bound, and its expression as stored.

    Raises:
      Exception: whatever a corrupt definition makes binding raise.
    """
    data = _decode(text)
    if not isinstance(data, dict) or data.get("v") != FORMAT:
        version = data.get("v") if isinstance(data, dict) else None
        raise ValueError(f"format {version!r} is not {FORMAT}")
    stored = data.get("expression")
    bound = bind_definition(data)
    bound.known_as(schedule_id)
    return bound, stored


@dataclasses.dataclass(frozen=True)
class StoredProblem:
    """A stored runtime definition that this process cannot read
    (``kind="unreadable"``: skipped, it does not fire) or reads differently
    from how it was written (``"changed"``: its expression has another
    canonical form now, ``bound`` is how it fires)."""

    schedule_id: str
    kind: str
    detail: str
    bound: BoundSchedule | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.schedule_id, "problem": self.kind, "detail": self.detail}


def describe_problems(problems: Sequence[StoredProblem], where: str) -> str:
    """One sentence on every stored definition with a problem (the
    leader's one WARNING when it loads them)."""
    parts = []
    for kind, verb in (
        ("unreadable", "cannot be read and are skipped"),
        ("changed", "read differently than when they were written, and fire as now read"),
    ):
        of_kind = sorted((p for p in problems if p.kind == kind), key=lambda p: p.schedule_id)
        if of_kind:
            shown = "; ".join(f"{p.schedule_id!r}: {p.detail}" for p in of_kind[:5])
            more = f"; and {len(of_kind) - 5} more" if len(of_kind) > 5 else ""
            parts.append(f"{len(of_kind)} {verb} ({shown}{more})")
    return (
        f"Stored runtime schedules in {where}: {', '.join(parts)}, under {SEMANTICS}. "
        "'dramatiq-cron check' lists them all; fix or re-add them."
    )


def stored_schedule(bound: BoundSchedule, *, created: int, updated: int, now: int, revision: int) -> RuntimeSchedule:
    return RuntimeSchedule(schedule=bound, created_ms=created, updated_ms=updated, as_of_ms=now, revision=revision)


def _datetime(ms: int, zone: dt.tzinfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=zone)


def already_exists(schedule_id: str) -> CronScheduleError:
    """The error of a create-only add of a stored name."""
    return CronScheduleError(
        f"runtime schedule {shown(schedule_id)} already exists (an add that may replace it, or an update, changes it)"
    )


#: The options of a :class:`Schedule`, which :meth:`RuntimeSchedules.update` may change.
SCHEDULE_FIELDS = frozenset(f.name for f in dataclasses.fields(Schedule))
_SCHEDULE_ORDER = tuple(f.name for f in dataclasses.fields(Schedule))
_LATER_FIELDS = frozenset(("at", "description", "grace", "max_runtime", "failure_threshold"))


def as_schedule(bound: BoundSchedule) -> Schedule:
    """The :class:`Schedule` that binds to ``bound`` again: every option as
    resolved when it was stored (an interval schedule has no expression)."""
    values = {f: getattr(bound, f) for f in SCHEDULE_FIELDS if hasattr(bound, f)}
    values["name"] = bound.name if bound.named else None
    if getattr(bound, "at", None) is not None:  # a one-shot: bound as a one-tick interval
        values.update(expression=None, every=None, offset=0, start=None, end=None)
    elif bound.every is not None:
        values["expression"] = None
    return Schedule(**values)


def changed_schedule(bound: BoundSchedule, changes: Mapping[str, Any]) -> Schedule:
    """The :class:`Schedule` of ``bound`` with ``changes`` (option ->
    value) applied and every other option as stored: what
    :meth:`RuntimeSchedules.update` writes, and what the dashboard's Edit
    form stores under a new name.  One kind of timing replaces another:
    an ``expression`` clears ``every`` and ``at``, ``every`` clears the
    expression and ``at``, and ``at`` (a one-shot takes nothing else)
    clears the expression, the interval and ``start``/``end``, unless the
    same changes set them too.

    Raises:
      CronScheduleError: a bad value, naming the actor.
    """
    out = dict(changes)
    if out.get("expression") is not None:
        out.setdefault("every", None)
        out.setdefault("offset", 0)
    if out.get("every") is not None:
        out.setdefault("expression", None)
    if out.get("expression") is not None or out.get("every") is not None:
        out.setdefault("at", None)
    if out.get("at") is not None:
        for field, cleared in (("expression", None), ("every", None), ("offset", 0), ("start", None), ("end", None)):
            out.setdefault(field, cleared)
    with of_actor(bound.actor_name):
        return dataclasses.replace(as_schedule(bound), **out)


def describe_changes(before: RuntimeSchedule, after: RuntimeSchedule) -> str:
    """What an update changed, for the audit trail: ``expression '0 9 * * *'
    -> '0 10 * * *'``.  Of args, kwargs and options only the changed keys
    are named (their values may be private)."""
    old, new = definition_of(before.schedule), definition_of(after.schedule)
    parts = [f"revision {after.revision}"]
    for key, value in new.items():
        was = old.get(key)
        if was == value:
            continue
        if key == "args":
            parts.append("args changed")
        elif key in ("kwargs", "options"):
            was = was or {}
            keys = sorted(k for k in {*was, *value} if was.get(k, _GONE) != value.get(k, _GONE))
            parts.append(f"{key} {', '.join(keys)} changed")
        else:
            parts.append(f"{key} {was!r} -> {value!r}")
    return "; ".join(parts)


_GONE = object()


def definition_of(bound: BoundSchedule) -> dict[str, Any]:
    """The stored form (format 1): every default already resolved, so any
    process reads the same schedule.  ``v`` comes first: the write script
    checks it there."""
    interval = bound.every is not None
    return {
        "v": FORMAT,
        "actor": bound.actor_name,
        "queue": bound.queue_name,
        "name": bound.name,
        "expression": None if interval else bound.expression,
        "every": bound.every,
        "offset": bound.offset,
        "timezone": bound.timezone,
        "args": list(bound.args),
        "kwargs": bound.kwargs,
        "catch_up": bound.catch_up,
        "catch_up_window": bound.catch_up_window,
        "jitter": bound.jitter,
        "max_age": bound.max_age,
        "overlap": bound.overlap,
        "overlap_ttl": bound.overlap_ttl,
        "options": bound.options,
        "start": bound.start,
        "end": bound.end,
        "at": bound.at,
        "description": bound.description or None,
        "grace": bound.grace,
        "max_runtime": bound.max_runtime,
        "failure_threshold": bound.failure_threshold,
    }


def bind_definition(data: dict[str, Any]) -> BoundSchedule:
    """A definition (format 1) bound by the same rules as ``cron=``."""
    name, args, kwargs, options = data["name"], data["args"], data["kwargs"], data["options"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CronScheduleError(f"actor {data['actor']!r}: bad runtime schedule name {shown(name)}")
    if not isinstance(args, list):
        raise CronScheduleError(f"args must be a list, got {args!r}")
    revision = int(data.get("rev", 0))
    for field in _MONITORING_FIELDS:  # absent from definitions stored before run monitoring
        data.setdefault(field, None)
    shared = _shared_fields(data)
    offset, start, end = data["offset"], data["start"], data["end"]
    description = data.get("description")
    expression = data["expression"]
    if (
        data.get("at") is not None
        or (isinstance(expression, str) and uses_hash(expression))
        or not (
            type(kwargs) is dict
            and type(options) is dict
            and _PLAIN.issuperset(map(type, shared))
            and type(offset) is int
            and type(start) in _BOUND_TYPES
            and type(end) in _BOUND_TYPES
            and (offset == 0 or data["every"] is not None)
            and type(data["timezone"]) is str
        )
    ):
        # Anything unusual takes the whole rule book, and its error; so does
        # an H expression, whose values (and whether they ever fire) depend
        # on the schedule's name.
        return bind_fully(data, revision)
    try:
        zone_name = _zone(data["timezone"])[0]
    except CronScheduleError:
        return bind_fully(data, revision)  # the error, naming the actor
    # Many schedules differ only in their name, arguments, zone, offset and
    # bounds: everything else is validated once per distinct combination
    # (bind_schedule, the rules of cron=; a parse of a cron expression
    # costs ~100 us), and each schedule is that template with its own name,
    # arguments, revision, zone, offset and bounds (checked here by the
    # same rules; a name matching NAME_PATTERN, a JSON list and a JSON
    # object need no further check).  Binding each in full dominated a
    # takeover's load of a large runtime set.
    template, values = _template(shared, json.dumps(options, sort_keys=True) if options else "")
    values = values.copy()
    values[_AT["name"]] = name
    values[_AT["args"]] = tuple(args)
    values[_AT["kwargs"]] = kwargs
    values[_AT["options"]] = dict(template.options)  # a private copy
    values[_AT["revision"]] = revision
    if description is not None:
        where = f"actor {template.actor_name!r}, runtime schedule {shown(name)}"
        values[_AT["description"]] = check_description(where, description)
    when = template.cadence
    if offset or start is not None or end is not None or zone_name != when.timezone:
        where = f"actor {template.actor_name!r}, runtime schedule {shown(name)}"
        label = interval_label(where, template.every, offset) if offset else when.expression
        when = cadence(label, zone_name, when.every, offset, *check_bounds(where, start, end))
    values[_AT["cadence"]] = when
    return BoundSchedule(*values)


def bind_fully(data: dict[str, Any], revision: int) -> BoundSchedule:
    # JSON decoding makes a new string for every value; schedules share a
    # few actors, queues, zones and policies, so share the strings.  (A
    # schedule bound from a template shares the template's.)
    for key in _SHARED_STRINGS:
        value = data.get(key)
        if isinstance(value, str):
            data[key] = sys.intern(value)
    actor_name = data["actor"]
    if not isinstance(actor_name, str):
        raise CronScheduleError(f"actor must be a string, got {shown(actor_name)}")
    check_runtime_actor(actor_name)
    if data.get("at") is not None:  # a one-shot: its interval fields follow from at
        data = {**data, "every": None, "offset": 0, "start": None, "end": None}
    # Definitions stored before these options existed lack them.
    values: dict[str, Any] = {f: data.get(f) if f in _LATER_FIELDS else data[f] for f in _SCHEDULE_ORDER}
    item = Schedule(**{**values, "args": tuple(values["args"])})
    return bind_schedule(
        actor_name,
        data["queue"],
        item,
        timezone="UTC",  # unused: the stored definition names its zone
        catch_up="each",
        catch_up_window=0,
        source="runtime",
        revision=revision,
    )


# The fields a template is keyed by: all but the name, arguments, options
# (keyed by their JSON), zone, offset, bounds and the revision.
_TEMPLATE_FIELDS = (
    "actor",
    "queue",
    "expression",
    "every",
    "catch_up",
    "catch_up_window",
    "jitter",
    "max_age",
    "overlap",
    "overlap_ttl",
    "grace",
    "max_runtime",
    "failure_threshold",
)
_MONITORING_FIELDS = ("grace", "max_runtime", "failure_threshold")
_shared_fields = operator.itemgetter(*_TEMPLATE_FIELDS)
# Only values of these exact types take the template path: ``True == 1`` and
# ``1.0 == 1`` would otherwise share a template validated for the int.
_PLAIN = frozenset((str, int, type(None)))
_BOUND_TYPES = (int, type(None))
# BoundSchedule's __init__ arguments, in order, and where the ones a
# schedule does not share with its template sit.
_INIT_FIELDS = tuple(f.name for f in dataclasses.fields(BoundSchedule) if f.init)
_AT = {
    field: _INIT_FIELDS.index(field)
    for field in ("name", "args", "kwargs", "options", "revision", "cadence", "description")
}


@functools.lru_cache(maxsize=16_384)
def _template(shared: tuple[Any, ...], options: str) -> tuple[BoundSchedule, list[Any]]:
    """A schedule validated in full with a placeholder name, no arguments,
    no offset, no bounds and in UTC, and its __init__ arguments."""
    data = dict(zip(_TEMPLATE_FIELDS, shared, strict=True))
    data.update(
        name="template",
        args=[],
        kwargs={},
        options=json.loads(options) if options else {},
        timezone="UTC",
        offset=0,
        start=None,
        end=None,
    )
    template = bind_fully(data, 0)
    return template, [getattr(template, field) for field in _INIT_FIELDS]


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> tuple[str, dt.tzinfo]:
    """A stored zone name, checked as ``cron=`` checks it, and its zone."""
    zone = parse_timezone(name, what="runtime schedule")
    return (sys.intern(name) if zone is not UTC else "UTC"), zone


# (The expression needs none: the normalised expression comes from a cache.)
_SHARED_STRINGS = ("actor", "queue", "timezone", "catch_up", "overlap")


def actor_name_of(actor: object) -> str:
    name = getattr(actor, "actor_name", actor)
    if not isinstance(name, str):
        raise CronScheduleError(f"runtime schedule: actor must be an actor or an actor name, got {shown(actor)}")
    check_runtime_actor(name)
    return name


def describe_actor(actor: object) -> str:
    return repr(getattr(actor, "actor_name", actor))


def schedule_id_of(actor: object, name: object) -> str:
    """The id of ``actor``'s (an actor or its name) runtime schedule ``name``, checked."""
    return runtime_id(actor_name_of(actor), name)


def check_listing(actor: object, search: object, cursor: object, limit: object) -> str | None:
    """The arguments of a runtime listing checked (the same errors on every
    store): the actor's name, or None for every actor's."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise CronScheduleError(f"runtime schedules: limit must be an int from 1 to 10000, got {limit!r}")
    if search is not None and not isinstance(search, str):
        raise CronScheduleError(f"runtime schedules: search must be a string, got {search!r}")
    if cursor is not None and not isinstance(cursor, str):
        raise CronScheduleError(f"runtime schedules: cursor must be a string, got {cursor!r}")
    return None if actor is None else actor_name_of(actor)
