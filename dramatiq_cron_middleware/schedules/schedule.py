"""Schedules: what users declare, and its binding to an actor.

A :class:`Schedule` is what a user declares (an expression or an interval,
plus per-schedule options).  When an actor is declared,
:func:`schedules_for_actor` turns the actor's ``cron`` option into bound
schedules (:func:`bind_schedule`, the one rule book for declared and
runtime schedules alike): validated, given a time zone and a stable
identity in the ledger.  A :class:`BoundSchedule` holds the identity and
the message options; when it ticks is its :class:`~.cadence.Cadence`.  Every
time value crossing this module's boundary is an integer number of
milliseconds since the Unix epoch, so the leader loop never handles naive
datetimes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from ..errors import CronScheduleError, is_int, shown
from .cadence import MIN_EVERY, Cadence, cadence, parse_timezone
from .expression import check_fires, normalise, uses_hash
from .ids import NAME_PATTERN, NAME_RULE, check_declared_actor, format_id
from .instants import NEVER, UTC, instant_ms

__all__ = [
    "DEFAULT_CATCH_UP_WINDOW",
    "DEFAULT_TIME_LIMIT",
    "MAX_DESCRIPTION",
    "MIN_EVERY",
    "NAME_PATTERN",
    "NAME_RULE",
    "NEVER",
    "BoundSchedule",
    "CatchUp",
    "CronSpec",
    "Overlap",
    "Schedule",
    "Source",
    "actor_signature",
    "bind_schedule",
    "of_actor",
    "parse_timezone",
    "schedules_for_actor",
    "uses_hash",
]

#: How a new leader treats ticks that fell due while nobody led:
#: ``"each"`` fires every missed tick inside the window once, ``"latest"``
#: fires only the newest one, ``"none"`` fires none of them.
CatchUp = Literal["each", "latest", "none"]

#: ``"allow"`` fires every tick; ``"skip"`` records a tick as skipped while
#: the previous message of the same schedule is still queued or running.
Overlap = Literal["allow", "skip"]

#: Where a schedule comes from: ``"code"`` (the ``cron`` actor option) or
#: ``"runtime"`` (added with ``CronMiddleware.add``, stored in Redis).
Source = Literal["code", "runtime"]

#: The longest ``description`` of a schedule, in characters.
MAX_DESCRIPTION = 500

#: dramatiq's ``TimeLimit`` default, used for the overlap guard's expiry
#: when the broker has no ``TimeLimit`` middleware to ask.
DEFAULT_TIME_LIMIT = 600_000
#: How far back missed ticks are caught up when a schedule names no window: a
#: failover, a restart or a deploy.
DEFAULT_CATCH_UP_WINDOW = 300_000

# Allowance for a message's time in the queue, added to the overlap guard's
# expiry when the schedule sets no max_age.
_QUEUEING_ALLOWANCE = 600_000

_CATCH_UP_POLICIES = ("each", "latest", "none")
_OVERLAP_POLICIES = ("allow", "skip")
# Message options the scheduler sets itself, or that have a field of their own.
_RESERVED_OPTIONS = {
    "max_age": "use Schedule(max_age=...)",
    "overlap_ttl": "use Schedule(overlap_ttl=...)",
    "eta": "the scheduler sets the delay (see jitter=)",
}


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One schedule of an actor, with its own options: a cron expression,
    or an interval (``every=``), optionally bounded by ``start``/``end``.

    Pass it as the ``cron`` actor option, alone or in a list, wherever a
    plain expression string would do::

        @dramatiq.actor(cron=[
            "0 * * * *",
            Schedule("30 1 * * *", timezone="Europe/Berlin", kwargs={"full": True}),
            Schedule(every=90_000, offset=15_000),
        ])

    Parameters:
      expression(str): A cron expression: 5 fields (minute hour
        day-of-month month day-of-week), or 6 fields whose *first* field
        is the second (``"*/10 * * * * *"`` fires every ten seconds), or
        one of the aliases ``@yearly``, ``@monthly``, ``@weekly``,
        ``@daily``, ``@hourly``.  Day-of-week 0 and 7 both mean Sunday.
        Defaults to None, meaning an interval schedule: then ``every`` is
        required (exactly one of the two is given).
      timezone(str): An IANA zone name the expression is evaluated in.
        Defaults to None, meaning the middleware's ``timezone``.
      name(str): The schedule's identity in the ledger.  Defaults to None,
        meaning the expression itself; set it to keep the ledger (and the
        catch-up) across a change of the expression.
      args(tuple): Positional arguments of every message (JSON values).
      kwargs(dict): Keyword arguments of every message (JSON values).
      catch_up(str): ``"each"``, ``"latest"`` or ``"none"``.  Defaults to
        None, meaning the middleware's ``catch_up``.
      catch_up_window(int): How far back, in milliseconds, missed ticks are
        still caught up.  Defaults to None, meaning the middleware's.
      jitter(int): Up to this many milliseconds of delay added to each
        message, the same for a given tick.  Defaults to 0.
      max_age(int): Drop the message (through dramatiq's ``AgeLimit``) if it
        waited longer than this many milliseconds.  Defaults to None.
      overlap(str): ``"allow"`` (the default) fires every tick; ``"skip"``
        records a tick as skipped while the previous message of this
        schedule is still queued or running.
      overlap_ttl(int): With ``overlap="skip"``, how long in milliseconds a
        message counts as queued or running at most, so that a worker
        killed mid-run cannot block the schedule for ever.  Defaults to
        None, meaning the actor's ``time_limit`` plus ``max_age`` (ten
        minutes without one) plus ``jitter``.
      options(dict): Further message options (for example ``max_retries``).
      every(int): An interval in milliseconds (at least 1000): the schedule
        ticks at ``k * every + offset`` since the Unix epoch, the same
        instants in every process.  Defaults to None, meaning a cron
        schedule (``expression`` is required).  The time zone then only
        formats ``cron_tick``.
      offset(int): With ``every``, where in the interval the ticks fall, in
        milliseconds, ``0 <= offset < every``: ``every=3_600_000,
        offset=900_000`` ticks at a quarter past every UTC hour.  Defaults
        to 0.
      start(int|datetime): The first instant at which the schedule may
        tick, in epoch milliseconds or as a timezone-aware ``datetime``
        (inclusive).  Defaults to None, meaning no lower bound.
      end(int|datetime): The instant from which the schedule no longer
        ticks (exclusive: a tick exactly at ``end`` does not fire).  Must
        be after ``start``.  Defaults to None, meaning no upper bound.
      at(int|datetime): A one-shot: the single instant, in epoch
        milliseconds or as a timezone-aware ``datetime``, at which the
        schedule fires once (under its catch-up policy, like any tick).
        Given alone: not with an expression, ``every``, ``start`` or
        ``end``.  Defaults to None, meaning a recurring schedule.
      description(str): What the schedule is for, in words, up to
        :data:`MAX_DESCRIPTION` characters; shown by ``list``, ``status``
        and the dashboard.  Defaults to None, meaning none.
      grace(int): Run monitoring: how long in milliseconds after its tick a
        run may take to start before the schedule is ``late``, and a tick
        nobody decided may be overdue before it is ``missed``.  Defaults
        to None, meaning the middleware's ``grace`` (60 s).
      max_runtime(int): Run monitoring: how long in milliseconds a run may
        take before the schedule is ``running_long``.  Defaults to None,
        meaning the middleware's ``max_runtime``, else the actor's
        ``time_limit`` plus 5 s.
      failure_threshold(int): Run monitoring: after this many failed runs
        in a row the schedule is ``failing`` (a success makes it ``ok``).
        Defaults to None, meaning the middleware's (1).
    """

    expression: str | None = None
    timezone: str | None = None
    name: str | None = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    catch_up: CatchUp | None = None
    catch_up_window: int | None = None
    jitter: int = 0
    max_age: int | None = None
    overlap: Overlap = "allow"
    overlap_ttl: int | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    every: int | None = None
    offset: int = 0
    start: int | dt.datetime | None = None
    end: int | dt.datetime | None = None
    at: int | dt.datetime | None = None
    description: str | None = None
    grace: int | None = None
    max_runtime: int | None = None
    failure_threshold: int | None = None

    def __post_init__(self) -> None:
        # Everything that needs no actor is checked now, so that a form (or
        # a test) can check a schedule on its own: the rules of cron=, with
        # a placeholder for the actor (arguments are checked against the
        # actor's signature when it is bound).
        bind_schedule("", "", self, timezone="UTC", catch_up="each", catch_up_window=0, fields_checked=False)


#: What the ``cron`` actor option accepts.
CronSpec = str | Schedule | Sequence[str | Schedule]


@dataclasses.dataclass(frozen=True, slots=True)
class BoundSchedule:
    """A validated schedule attached to an actor; what the leader fires:
    its identity, the message it sends, its policies, and its
    :class:`~.cadence.Cadence` (whose parts and arithmetic it also offers
    under their own names: ``expression``, ``next_after``...).  ``source``
    says where the schedule was declared (``"code"``, or ``"runtime"`` for
    one stored in Redis) and ``revision`` is a runtime schedule's version
    in ``{prefix}:runtime:revs`` (0 for declared ones).
    """

    actor_name: str
    queue_name: str
    name: str
    cadence: Cadence
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    catch_up: CatchUp
    catch_up_window: int
    jitter: int
    max_age: int | None
    overlap: Overlap
    overlap_ttl: int
    options: dict[str, Any]
    source: Source = "code"
    revision: int = 0
    #: What the schedule is for ("" for none), shown to operators.
    description: str = ""
    #: Whether the schedule was given a ``name=`` (otherwise ``name`` holds
    #: the expression, for display).
    named: bool = dataclasses.field(default=True, compare=False, repr=False)
    #: Run monitoring's thresholds (ms, ms, runs); None: the middleware's.
    grace: int | None = None
    max_runtime: int | None = None
    failure_threshold: int | None = None
    # The id, kept on first use (slots, not a __dict__: a leader may hold a
    # large runtime set, and a dict per schedule doubles its memory).
    _id: str | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

    @property
    def id(self) -> str:
        """The schedule's identity in the ledger, which no change of its
        expression, zone or interval moves: the actor's name for an actor's
        one unnamed schedule, ``actor/name`` for a named one, and
        ``actor:name`` for a runtime one (dramatiq actor names contain no
        ``:`` or ``/``, so the three can never collide)."""
        cached = self._id
        if cached is None:
            runtime = self.source == "runtime"
            cached = format_id(self.actor_name, self.name if self.named or runtime else None, runtime=runtime)
            object.__setattr__(self, "_id", cached)
        return cached

    def known_as(self, schedule_id: str) -> None:
        """Check that ``schedule_id`` (a stored definition's key) is this
        schedule's id, and keep that string as the id: a large runtime set
        holds one copy of each id, not two.

        Raises:
          ValueError: when the definition describes another schedule.
        """
        if self.id != schedule_id:
            raise ValueError(f"it describes {shown(self.id)}")
        object.__setattr__(self, "_id", schedule_id)

    # The cadence's parts and arithmetic, by the names every caller reads.
    @property
    def expression(self) -> str:
        return self.cadence.expression

    @property
    def timezone(self) -> str:
        return self.cadence.timezone

    @property
    def zone(self) -> dt.tzinfo:
        return self.cadence.zone

    @property
    def has_seconds(self) -> bool:
        return self.cadence.has_seconds

    @property
    def every(self) -> int | None:
        return self.cadence.every

    @property
    def offset(self) -> int:
        return self.cadence.offset

    @property
    def start(self) -> int | None:
        return self.cadence.start

    @property
    def end(self) -> int | None:
        return self.cadence.end

    @property
    def at(self) -> int | None:
        """A one-shot's instant, None for a recurring schedule."""
        return self.cadence.at

    @property
    def shape(self) -> str:
        return self.cadence.shape

    def next_after(self, instant_ms: int) -> int:
        return self.cadence.next_after(instant_ms)

    def last_before(self, instant_ms: int) -> int:
        """:meth:`.Cadence.last_before`, its error naming the schedule."""
        try:
            return self.cadence.last_before(instant_ms)
        except CronScheduleError as exc:
            raise CronScheduleError(f"schedule {shown(self.id)}: {exc}") from None


def schedules_for_actor(
    actor_name: str,
    queue_name: str,
    spec: object,
    *,
    timezone: str,
    catch_up: CatchUp,
    catch_up_window: int,
    time_limit: int = DEFAULT_TIME_LIMIT,
    signature: inspect.Signature | None = None,
) -> list[BoundSchedule]:
    """Validate an actor's ``cron`` option and bind it to the actor.

    ``time_limit`` is the actor's time limit in milliseconds, from which the
    default overlap guard expiry is derived; ``signature`` is the actor
    function's (see :func:`actor_signature`), which every schedule's
    ``args``/``kwargs`` must fit.

    Raises:
      CronScheduleError: naming the actor and the offending value.
    """
    check_declared_actor(actor_name)
    items: list[object]
    if isinstance(spec, (str, Schedule)):
        items = [spec]
    elif isinstance(spec, (list, tuple)):
        items = list(spec)
        if not items:
            raise CronScheduleError(
                f"actor {shown(actor_name)}: cron= needs at least one expression, got {shown(spec)}"
            )
    else:
        raise CronScheduleError(
            f"actor {shown(actor_name)}: cron= must be a cron expression string, a Schedule or a list of them, "
            f"got {shown(spec)} ({type(spec).__name__})"
        )
    bound = [
        bind_schedule(
            actor_name,
            queue_name,
            item,
            timezone=timezone,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            time_limit=time_limit,
            signature=signature,
        )
        for item in items
    ]
    unnamed = [(item, schedule) for item, schedule in zip(items, bound, strict=True) if not schedule.named]
    if len(unnamed) > 1:
        # Names, not expressions, identify schedules (docs/design.md,
        # "Schedule identity"): say which ones lack a name, and how to give it.
        given = ", ".join(repr(_as_given(item, schedule)) for item, schedule in unnamed)
        fixed = ", ".join(_named_hint(schedule) for _, schedule in unnamed)
        raise CronScheduleError(
            f"actor {shown(actor_name)}: {len(unnamed)} schedules without name= ({given}); an actor's schedules are "
            f"identified by their names, not their expressions, so all but one need name=, for example "
            f"cron=[{fixed}]"
        )
    seen: dict[str, BoundSchedule] = {}
    for schedule in bound:
        if schedule.id in seen:
            raise CronScheduleError(
                f"actor {shown(actor_name)}: two schedules share the identity {shown(schedule.id)}; "
                "give them distinct name="
            )
        seen[schedule.id] = schedule
    return bound


def _as_given(item: object, schedule: BoundSchedule) -> str:
    """A schedule's expression as the user wrote it (an interval's label)."""
    if isinstance(item, str):
        return item
    expression = item.expression if isinstance(item, Schedule) else None
    return expression if expression is not None else schedule.expression


def _named_hint(schedule: BoundSchedule) -> str:
    """How to write ``schedule`` with a name, for an error message."""
    if schedule.every is not None:
        offset = f", offset={schedule.offset}" if schedule.offset else ""
        return f'Schedule(every={schedule.every}{offset}, name="...")'
    return f'Schedule({json.dumps(schedule.expression)}, name="...")'


def actor_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """The signature a schedule's ``args``/``kwargs`` are bound to: the
    actor function's, or None when it cannot be read (some builtins and C
    callables), in which case arguments are not checked."""
    try:
        return _cached_signature(fn)
    except TypeError:  # an unhashable callable: read it each time
        return _read_signature(fn)


def _read_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


# add_many binds thousands of schedules of a few actors.
_cached_signature = functools.lru_cache(maxsize=1024)(_read_signature)


def _check_arguments(schedule: BoundSchedule, signature: inspect.Signature) -> None:
    """Refuse ``args``/``kwargs`` the actor could not be called with: they
    would raise TypeError in the worker on every tick."""
    try:
        signature.bind(*schedule.args, **schedule.kwargs)
    except TypeError as exc:
        plain = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        raise CronScheduleError(
            f"actor {shown(schedule.actor_name)}, schedule {shown(schedule.id)}: args={shown(list(schedule.args))}, "
            f"kwargs={shown(schedule.kwargs)} do not fit {schedule.actor_name}{plain}: {exc}"
        ) from None


def bind_schedule(
    actor_name: str,
    queue_name: str,
    item: object,
    *,
    timezone: str,
    catch_up: CatchUp,
    catch_up_window: int,
    time_limit: int = DEFAULT_TIME_LIMIT,
    source: Source = "code",
    revision: int = 0,
    signature: inspect.Signature | None = None,
    name: str | None = None,
    fields_checked: bool = True,
) -> BoundSchedule:
    """Validate one schedule (an expression string or a :class:`Schedule`)
    and bind it to an actor: the one rule book for declared and runtime
    schedules alike.

    Parameters:
      actor_name(str): The actor the schedule fires.
      queue_name(str): The actor's queue.
      item(str|Schedule): What the user gave.
      timezone(str): The zone used when the schedule names none.
      catch_up(str): The policy used when the schedule sets none.
      catch_up_window(int): The window (ms) used when the schedule sets none.
      time_limit(int): The actor's time limit in milliseconds, from which
        the default overlap guard expiry is derived.
      source(str): ``"code"`` or ``"runtime"`` (see :class:`BoundSchedule`).
      revision(int): A runtime schedule's revision; 0 for declared ones.
      signature(inspect.Signature): The actor function's signature, which
        ``args``/``kwargs`` must fit (see :func:`actor_signature`).
        Defaults to None, meaning not checked (an actor this process does
        not declare, or a stored definition read back).
      name(str): The schedule's name, instead of the item's (a runtime
        schedule's name is given beside its Schedule).  Defaults to None,
        meaning the item's.
      fields_checked(bool): Whether the options that need neither actor
        nor defaults (windows, jitter, overlap, args, kwargs, options) are
        known good: a :class:`Schedule` checks them when it is built, by
        calling this with False (which leaves a well-formed zone this
        machine lacks to the binding, so that its error names the actor).
        Defaults to True.

    Raises:
      CronScheduleError: naming the actor and the offending value.
    """
    if isinstance(item, str):
        _normalise(actor_name, item)  # its error names the actor
        item = Schedule(item)
    if not isinstance(item, Schedule):
        raise CronScheduleError(
            f"actor {shown(actor_name)}: cron= entries must be expression strings or Schedule objects, "
            f"got {shown(item)} ({type(item).__name__})"
        )
    one_shot = None
    if item.at is not None:
        where, one_shot = _one_shot(actor_name, item)
        expression = _one_shot_label(one_shot)
    elif item.every is not None or item.expression is None:
        where, expression = _interval(actor_name, item)
    else:
        where = f"{_subject(actor_name)}cron {shown(item.expression)}"
        expression, _ = _normalise(actor_name, item.expression)
        if item.offset != 0:
            raise CronScheduleError(f"{where}: offset= applies to every= schedules only, got {shown(item.offset)}")
    start, end = check_bounds(where, item.start, item.end)
    zone_name = item.timezone if item.timezone is not None else timezone
    zone = parse_timezone(zone_name, what=where, known=fields_checked)
    # The name is checked where it becomes part of an id (bound to an
    # actor), so that the error names both.
    given = item.name if name is None else name
    if given is not None and (not isinstance(given, str) or not NAME_PATTERN.match(given)):
        raise CronScheduleError(f"{where}: {NAME_RULE}, got {shown(given)}")
    name = given if isinstance(given, str) else expression
    if _CONTROL.search(name) or _CONTROL.search(actor_name):
        # Identities travel to the scripts one per line.
        raise CronScheduleError(
            f"{where}: control characters cannot appear in a schedule's identity, got {shown(name)}"
        )
    policy = item.catch_up if item.catch_up is not None else catch_up
    if policy not in _CATCH_UP_POLICIES:
        raise CronScheduleError(f"{where}: catch_up must be one of {_CATCH_UP_POLICIES}, got {shown(policy)}")
    window = item.catch_up_window if item.catch_up_window is not None else catch_up_window
    if not fields_checked:
        _check_ms(where, "catch_up_window", window, allow_none=False)
        _check_ms(where, "jitter", item.jitter, allow_none=False)
        _check_ms(where, "max_age", item.max_age, allow_none=True, positive=True)
        if item.overlap not in _OVERLAP_POLICIES:
            raise CronScheduleError(f"{where}: overlap must be one of {_OVERLAP_POLICIES}, got {shown(item.overlap)}")
        _check_ms(where, "overlap_ttl", item.overlap_ttl, allow_none=True, positive=True)
        _check_ms(where, "grace", item.grace, allow_none=True)
        _check_ms(where, "max_runtime", item.max_runtime, allow_none=True, positive=True)
        threshold = item.failure_threshold
        if threshold is not None and not is_int(threshold, 1):
            raise CronScheduleError(
                f"{where}: failure_threshold must be a positive int of runs, got {shown(threshold)}"
            )
        if not isinstance(item.args, (tuple, list)):
            raise CronScheduleError(f"{where}: args must be a tuple or list, got {shown(item.args)}")
        if not isinstance(item.kwargs, Mapping):
            raise CronScheduleError(f"{where}: kwargs must be a dict, got {shown(item.kwargs)}")
        if not all(isinstance(key, str) for key in item.kwargs):
            raise CronScheduleError(f"{where}: kwargs keys must be strings, got {shown(list(item.kwargs))}")
        if not isinstance(item.options, Mapping):
            raise CronScheduleError(f"{where}: options must be a dict, got {shown(item.options)}")
        for key in item.options:
            if not isinstance(key, str) or key.startswith("cron_") or key in _RESERVED_OPTIONS:
                hint = (
                    _RESERVED_OPTIONS.get(key, "it is set by the scheduler") if isinstance(key, str) else "not a string"
                )
                raise CronScheduleError(f"{where}: message option {shown(key)} cannot be set in options= ({hint})")
        for label, value in (("args", item.args), ("kwargs", item.kwargs), ("options", item.options)):
            if not value:  # () and {}: the usual case, and JSON already
                continue
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise CronScheduleError(f"{where}: {label} must be JSON-serialisable ({exc}): {shown(value)}") from None
    description = check_description(where, item.description)
    overlap_ttl = item.overlap_ttl
    if overlap_ttl is None:
        # Long enough to cover a message's wait in the queue and its whole
        # run; after that a crashed run no longer blocks the schedule.
        queueing = item.max_age if item.max_age is not None else _QUEUEING_ALLOWANCE
        overlap_ttl = int(time_limit) + queueing + item.jitter
    name = name.strip()
    # ``H`` fields hash the declared form of the id, ``actor/name``, for
    # runtime schedules too (croniter: CRC32, the same in every process).
    hashed = item.every is None and one_shot is None and uses_hash(expression)
    hash_id = format_id(actor_name, name) if hashed else ""
    when = cadence(
        expression,
        zone_name if zone is not UTC else "UTC",
        item.every,
        item.offset if item.every is not None else 0,
        start,
        end,
        one_shot,
        hash_id,
    )
    if actor_name and hash_id:
        # H may pick, for this identity, a day that never comes.
        check_fires(where, expression, when.has_seconds, hash_id)
    bound = BoundSchedule(
        actor_name=actor_name,
        queue_name=queue_name,
        name=name,
        cadence=when,
        named=given is not None,
        args=tuple(item.args),
        kwargs=dict(item.kwargs),
        catch_up=policy,
        catch_up_window=window,
        jitter=item.jitter,
        max_age=item.max_age,
        overlap=item.overlap,
        overlap_ttl=overlap_ttl,
        options=dict(item.options),
        source=source,
        revision=revision,
        description=description,
        grace=item.grace,
        max_runtime=item.max_runtime,
        failure_threshold=item.failure_threshold,
    )
    if signature is not None:
        _check_arguments(bound, signature)
    return bound


def _interval(actor_name: str, item: Schedule) -> tuple[str, str]:
    """Validate ``every``/``offset``; return the error context and the
    schedule's label (its ``expression`` and default name)."""
    if item.expression is not None:
        raise CronScheduleError(
            f"{_subject(actor_name, end=': ')}give either a cron expression or every=, not both "
            f"(got {shown(item.expression)} and every={shown(item.every)})"
        )
    if item.every is None:
        raise CronScheduleError(f"{_subject(actor_name, end=': ')}a Schedule needs a cron expression or every=<ms>")
    where = f"{_subject(actor_name)}every {shown(item.every)}"
    return where, interval_label(where, item.every, item.offset)


def _one_shot(actor_name: str, item: Schedule) -> tuple[str, int]:
    """Validate a one-shot's ``at``; return the error context and the
    instant in epoch ms."""
    where = f"{_subject(actor_name)}at {shown(item.at)}"
    others = {"expression": item.expression, "every": item.every, "start": item.start, "end": item.end}
    given = [f"{k}={shown(v)}" for k, v in others.items() if v is not None]
    if given or item.offset:
        given += [f"offset={shown(item.offset)}"] if item.offset else []
        raise CronScheduleError(f"{where}: at= is a one-shot and takes no {', '.join(given)}")
    at_ms = _instant(where, "at", item.at)
    assert at_ms is not None
    if at_ms + 1 >= NEVER:  # its one tick is [at, at + 1)
        raise CronScheduleError(f"{where}: at must be between 1970 and 9999, got {shown(item.at)}")
    return where, at_ms


@functools.lru_cache(maxsize=4096)
def _one_shot_label(at_ms: int) -> str:
    when = dt.datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    return "once at " + when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_description(where: str, description: object) -> str:
    """Validate a ``description``; return it ("" for None)."""
    if description is None:
        return ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        given = description if not isinstance(description, str) else f"{len(description)} characters"
        raise CronScheduleError(
            f"{where}: description must be a string of at most {MAX_DESCRIPTION} characters, got {shown(given)}"
        )
    return description


def interval_label(where: str, every: object, offset: object) -> str:
    """Validate ``every``/``offset``; return the schedule's label (its
    ``expression`` and default name)."""
    if not is_int(every, MIN_EVERY):
        raise CronScheduleError(f"{where}: every must be an int of at least {MIN_EVERY} ms, got {shown(every)}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < every:
        raise CronScheduleError(f"{where}: offset must be an int of ms with 0 <= offset < every, got {shown(offset)}")
    return _interval_text(every, offset)


@functools.lru_cache(maxsize=65_536)
def _interval_text(every: int, offset: int) -> str:
    # One string per distinct interval and offset, however many schedules
    # share it.
    return f"every {every} ms" + (f", offset {offset} ms" if offset else "")


def check_bounds(where: str, start: object, end: object) -> tuple[int | None, int | None]:
    """Validate ``start``/``end``; return them as epoch ms (or None)."""
    start_ms = _instant(where, "start", start)
    end_ms = _instant(where, "end", end)
    if start_ms is not None and end_ms is not None and start_ms >= end_ms:
        raise CronScheduleError(f"{where}: start must be before end, got start={shown(start)}, end={shown(end)}")
    return start_ms, end_ms


def _instant(where: str, label: str, value: object) -> int | None:
    """A bound as epoch ms: an int of ms, or an aware datetime."""
    if value is None:
        return None
    try:
        return instant_ms(value, text=False, what=label)
    except ValueError as exc:
        raise CronScheduleError(f"{where}: {exc}") from None


def _check_ms(where: str, label: str, value: object, *, allow_none: bool, positive: bool = False) -> None:
    if value is None and allow_none:
        return
    low = 1 if positive else 0
    if not is_int(value, low):
        kind = "positive" if positive else "non-negative"
        raise CronScheduleError(f"{where}: {label} must be a {kind} int of milliseconds, got {shown(value)}")


def _subject(actor_name: str, *, end: str = ", ") -> str:
    """How an error names what it is about: the actor, or (a Schedule
    checked on its own, before any actor) the Schedule."""
    return f"actor {shown(actor_name)}{end}" if actor_name else ("Schedule: " if end == ": " else "Schedule, ")


@contextlib.contextmanager
def of_actor(actor_name: str) -> Iterator[None]:
    """Name the actor in the error of a :class:`Schedule` built for it
    (which checks itself before it knows its actor)."""
    try:
        yield
    except CronScheduleError as exc:
        text = str(exc)
        for unbound, end in (("Schedule, ", ", "), ("Schedule: ", ": ")):
            if text.startswith(unbound):
                raise CronScheduleError(_subject(actor_name, end=end) + text[len(unbound) :]) from None
        raise


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _normalise(actor_name: str, expression: object) -> tuple[str, bool]:
    """Return the expression with single spaces, and whether it has seconds."""
    if not isinstance(expression, str):
        raise CronScheduleError(
            f"{_subject(actor_name, end=': ')}cron expression must be a string, got {shown(expression)} "
            f"({type(expression).__name__})"
        )
    return normalise(f"{_subject(actor_name)}cron {shown(expression)}", expression, actor_name)
