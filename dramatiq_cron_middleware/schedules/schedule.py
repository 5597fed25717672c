"""Schedules: parsing and validating cron expressions, and next fire times.

A :class:`Schedule` is what a user declares (an expression plus per-schedule
options).  When an actor is declared, :func:`schedules_for_actor` turns the
actor's ``cron`` option into bound schedules: validated, given a time zone
and a stable identity in the ledger.  Every time value crossing this module's
boundary is an integer number of milliseconds since the Unix epoch, so the
leader loop never handles naive datetimes.

croniter matches expressions against wall-clock times only; this module
maps wall-clock ticks to instants, which is where daylight saving time is
decided (see docs/schedules.md):

- A *fixed-time* schedule (none of its second, minute and hour fields
  starts with ``*``) fires once per wall-clock tick: in a fall-back repeated
  hour only at the first occurrence, and a tick inside a spring-forward gap
  at the first instant after the gap.
- Any other schedule repeats within the hour and fires by elapsed time:
  through both occurrences of a repeated hour, and never at wall-clock
  times that a gap skips.

An *interval* schedule (``Schedule(every=..., offset=...)``) has no
expression: it ticks at ``k * every + offset`` for every integer ``k``,
counted from the Unix epoch, so every process (and every host) agrees on
its ticks without any shared state, and no time zone or DST rule applies.
``start``/``end`` bound any schedule to the half-open span
``[start, end)``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import functools
import hashlib
import inspect
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

from ..errors import CronScheduleError, shown
from .expression import canonical_fields, check_ascii

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
    "check_hashed",
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

#: What :meth:`BoundSchedule.next_after` returns when no tick follows (the
#: schedule's ``end`` has passed): 9999-01-01T00:00:00Z in epoch ms.  It
#: is later than any tick a schedule ever returns, and still converts to a
#: ``datetime`` in every time zone, so code that formats or heaps "the next
#: tick" keeps working for a schedule that has ended.
NEVER = 253_370_764_800_000

#: The longest ``description`` of a schedule, in characters.
MAX_DESCRIPTION = 500

#: The shortest interval of ``Schedule(every=...)``, in milliseconds.
MIN_EVERY = 1000

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
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Message options the scheduler sets itself, or that have a field of their own.
_RESERVED_OPTIONS = {
    "max_age": "use Schedule(max_age=...)",
    "overlap_ttl": "use Schedule(overlap_ttl=...)",
    "eta": "the scheduler sets the delay (see jitter=)",
}
_UTC = dt.timezone.utc
_EPSILON = dt.timedelta(microseconds=1)
# croniter yields nothing before this; walking further back means the
# expression has no earlier match.
_MIN_WALL = dt.datetime(1971, 1, 1)


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


@dataclasses.dataclass(frozen=True)
class _Transition:
    """One change of a zone's UTC offset, and the wall-clock span it skips
    (offset grows) or repeats (offset shrinks): ``[wall_start, wall_end)``."""

    at_ms: int
    wall_start: dt.datetime
    wall_end: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class BoundSchedule:
    """A validated schedule attached to an actor; what the leader fires.

    ``expression`` is the normalised cron expression, or for an interval
    schedule (``every`` set) a label such as ``"every 60000 ms"``.
    ``start``/``end`` (epoch ms or None) bound the ticks to
    ``[start, end)``.  ``source`` says where the schedule was declared
    (``"code"``, or ``"runtime"`` for one stored in Redis) and ``revision``
    is a runtime schedule's version in ``{prefix}:runtime:revs`` (0 for
    declared ones).  Every method returns epoch milliseconds.
    """

    actor_name: str
    queue_name: str
    expression: str
    timezone: str
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    catch_up: CatchUp
    catch_up_window: int
    jitter: int
    max_age: int | None
    overlap: Overlap
    overlap_ttl: int
    options: dict[str, Any]
    zone: dt.tzinfo = dataclasses.field(compare=False, repr=False)
    has_seconds: bool = dataclasses.field(compare=False, repr=False)
    fixed_time: bool = dataclasses.field(default=False, compare=False, repr=False)
    day_or: bool = dataclasses.field(default=True, compare=False, repr=False)
    every: int | None = None
    offset: int = 0
    start: int | None = None
    end: int | None = None
    source: Source = "code"
    revision: int = 0
    #: A one-shot's instant (epoch ms), None for a recurring schedule; its
    #: ticks are then ``[at, at + 1)`` of a one-second interval: ``at`` alone.
    at: int | None = None
    #: What the schedule is for ("" for none), shown to operators.
    description: str = ""
    #: Whether the schedule was given a ``name=`` (otherwise ``name`` holds
    #: the expression, for display).
    named: bool = dataclasses.field(default=True, compare=False, repr=False)
    #: Run monitoring's thresholds (ms, ms, runs); None: the middleware's.
    grace: int | None = None
    max_runtime: int | None = None
    failure_threshold: int | None = None
    # Caches, filled on first use (slots, not a __dict__: a leader may hold a
    # large runtime set, and a dict per schedule doubles its memory).
    _id: str | None = dataclasses.field(default=None, init=False, compare=False, repr=False)
    _shape: str | None = dataclasses.field(default=None, init=False, compare=False, repr=False)
    _key: tuple[object, ...] | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

    @property
    def id(self) -> str:
        """The schedule's identity in the ledger, which no change of its
        expression, zone or interval moves: the actor's name for an actor's
        one unnamed schedule, ``actor/name`` for a named one, and
        ``actor:name`` for a runtime one (dramatiq actor names contain no
        ``:`` or ``/``, so the three can never collide)."""
        cached = self._id
        if cached is None:
            from .ids import format_id  # the id grammar's one home (it imports NAME_PATTERN from here)

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

    @property
    def shape(self) -> str:
        """A digest of everything that decides the ticks (expression or
        interval, zone, bounds): when it changes under the same identity,
        the schedule starts from now instead of catching up the new shape's
        ticks since the old one last fired.  (A runtime schedule's is
        compared by the write that replaces it, not by the leader.)"""
        cached = self._shape
        if cached is None:
            text = f"{self.expression}|{self.timezone}|{self.every}|{self.offset}|{self.start}|{self.end}"
            cached = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]
            object.__setattr__(self, "_shape", cached)
        return cached

    def next_after(self, instant_ms: int) -> int:
        """The first tick strictly after ``instant_ms``, in epoch ms, or
        :data:`NEVER` when no tick follows (the schedule's ``end`` has
        passed).  Before ``start`` it is the first tick at or after
        ``start``."""
        tick = self._next(instant_ms, walk=True)
        assert tick is not None
        return tick

    def next_after_if_known(self, instant_ms: int) -> int | None:
        """:meth:`next_after`, or None when answering would take a walk of
        the cron expression (nothing shared with other schedules answers
        it yet): a caller with many schedules asks those last, oldest
        instant first, so that one walk answers all that share it."""
        return self._next(instant_ms, walk=False)

    def _next(self, instant_ms: int, *, walk: bool) -> int | None:
        if instant_ms >= NEVER:
            return NEVER
        if self.start is not None and instant_ms < self.start:
            instant_ms = self.start - 1
        tick = self._interval_after(instant_ms) if self.every is not None else self._cron_after(instant_ms, walk=walk)
        if tick is None:
            return None
        if tick >= NEVER or (self.end is not None and tick >= self.end):
            return NEVER
        return tick

    def _interval_after(self, instant_ms: int) -> int:
        assert self.every is not None
        return ((instant_ms - self.offset) // self.every + 1) * self.every + self.offset

    def _interval_before(self, instant_ms: int) -> int:
        assert self.every is not None
        # ceil((instant - offset) / every) - 1, in integers.
        return (-((self.offset - instant_ms) // self.every) - 1) * self.every + self.offset

    def _cron_after(self, instant_ms: int, *, walk: bool = True) -> int | None:
        # Schedules that share an expression and zone share their ticks, and
        # a leader asks for thousands of them after a sync or a fire, from
        # instants close together (ledger entries written in the same
        # second, the same tick just fired).  The first tick after i0 being
        # t, it is also the first tick after any instant in [i0, t): so one
        # walk per expression and zone answers them all.
        # A catch-up enumerates one schedule's backlog ticks after another's
        # (the tick queue's chunks), so the window has moved past the ticks
        # the next schedule asks for: each walk is also remembered by its
        # instant, and every tick of a backlog is walked once, not once per
        # schedule.
        key = self._tick_key
        window = _NEXT_TICKS.get(key)
        if window is not None and window[0] <= instant_ms < window[1]:
            return window[1]
        tick = _WALKS.get((key, instant_ms))
        if tick is not None:
            return tick
        if not walk:
            return None
        tick = self._next_after(instant_ms)
        if len(_NEXT_TICKS) >= _NEXT_TICKS_LIMIT:
            _NEXT_TICKS.clear()  # schedules come and go: never grow without bound
        _NEXT_TICKS[key] = (instant_ms, tick)
        if len(_WALKS) >= _WALKS_LIMIT:
            _WALKS.clear()
        _WALKS[key, instant_ms] = tick
        return tick

    @property
    def _tick_key(self) -> tuple[object, ...]:
        cached = self._key
        if cached is None:
            hashed = _hashed(self.expression)
            cached = (
                self.expression,
                self.has_seconds,
                self.day_or,
                self.timezone,
                self.fixed_time,
                self._hash_id if hashed else "",
            )
            if not hashed:  # one tuple for the thousands of schedules sharing it
                if len(_NEXT_TICKS_KEYS) >= _NEXT_TICKS_LIMIT:
                    _NEXT_TICKS_KEYS.clear()  # as _NEXT_TICKS: never grow without bound
                cached = _NEXT_TICKS_KEYS.setdefault(cached, cached)
            object.__setattr__(self, "_key", cached)
        return cached

    def _next_after(self, instant_ms: int) -> int:
        local = dt.datetime.fromtimestamp(instant_ms // 1000, tz=self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        fold = self._repeat(wall)
        # The first passes through repeated hours (fold=0) and, for
        # elapsed-time schedules, the second passes (fold=1) are two
        # sequences, each increasing with the wall clock; the answer is the
        # earlier of their first ticks after the instant.  In the second
        # pass of a repeated hour, no first-pass tick can follow any more,
        # and vice versa.
        start0 = fold.wall_end - _EPSILON if fold is not None and local.fold == 1 else wall
        best = self._find(start0, lambda t: t > instant_ms, forward=True, fold=0)
        # UTC repeats no hour, so the second-pass walk would only repeat the
        # first (and double the cost of the leader's busiest call).
        if not self.fixed_time and self.zone is not _UTC:
            start1 = fold.wall_start - _EPSILON if fold is not None and local.fold == 0 else wall
            best = min(best, self._find(start1, lambda t: t > instant_ms, forward=True, fold=1))
        return best

    def last_before(self, instant_ms: int) -> int:
        """The last tick strictly before ``instant_ms``, in epoch ms (after
        ``end``, the last tick before ``end``).

        Raises:
          CronScheduleError: when no tick precedes ``instant_ms``: it is at
            or before the schedule's ``start`` (or its first tick), or a
            cron expression has no match since 1971.
        """
        instant_ms = min(instant_ms, NEVER)
        if self.end is not None:
            instant_ms = min(instant_ms, self.end)
        tick = self._interval_before(instant_ms) if self.every is not None else self._cron_before(instant_ms)
        if self.start is not None and tick < self.start:
            raise CronScheduleError(
                f"schedule {shown(self.id)} has no tick before {instant_ms}: it starts at {self.start}"
            )
        return tick

    def _cron_before(self, instant_ms: int) -> int:
        ceiling_ms = -(-instant_ms // 1000) * 1000
        local = dt.datetime.fromtimestamp(ceiling_ms // 1000, tz=self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        if not self.has_seconds and wall.second:
            # croniter truncates its start to the minute; start from the
            # next whole minute so a tick earlier in this minute is seen.
            wall = wall.replace(second=0) + dt.timedelta(minutes=1)
        fold = self._repeat(local.replace(tzinfo=None, fold=0))
        start0 = fold.wall_end if fold is not None and local.fold == 1 else wall
        best = self._find(start0, lambda t: t < instant_ms, forward=False, fold=0)
        if not self.fixed_time and self.zone is not _UTC:
            start1 = fold.wall_start if fold is not None and local.fold == 0 else wall
            best = max(best, self._find(start1, lambda t: t < instant_ms, forward=False, fold=1))
        return best

    def ticks_between(self, after_ms: int, until_ms: int) -> Iterator[int]:
        """Every tick ``t`` with ``after_ms < t <= until_ms``, in order
        (within ``start``/``end``)."""
        tick = self.next_after(after_ms)
        while tick <= until_ms:
            yield tick
            tick = self.next_after(tick)

    def count_between(self, start_ms: int, end_ms: int) -> int:
        """How many ticks ``t`` with ``start_ms <= t < end_ms`` there are,
        without listing them: arithmetic for an interval; for a cron
        expression, a local day, hour or minute that fires and lies far
        from any change of the zone's offset counts as the product of its
        finer time fields, so ten years of a per-second schedule take a few
        thousand walks, not 315 million."""
        low = max(start_ms, self.start if self.start is not None else start_ms, 0)
        high = min(end_ms, self.end if self.end is not None else end_ms, NEVER)
        if high <= low:
            return 0
        if self.every is not None:
            first = self._interval_after(low - 1)
            return 0 if first >= high else (high - 1 - first) // self.every + 1
        blocks = self._blocks()
        count, tick = 0, self.next_after(low - 1)
        while tick < high:
            for block, per in blocks:
                start, end = block(self, tick)
                if low <= start and end <= high and self._steady(start, end):
                    count += per  # every tick of a block that fires
                    tick = self.next_after(end - 1)
                    break
            else:  # near an offset change, or at the range's ends: tick by tick, to the minute's end
                start, end = _minute(self, tick)
                while tick < min(end, high):
                    count += 1
                    tick = self.next_after(tick)
        return count

    def _blocks(self) -> list[tuple[Callable[[BoundSchedule, int], tuple[int, int]], int]]:
        """The local day, hour and (with seconds) minute, each with how
        many ticks it holds when it fires and the offset stays."""
        fields = self._cron(dt.datetime(2000, 1, 1)).expanded

        def size(index: int, full: int) -> int:
            return full if fields[index] == ["*"] else len(set(fields[index]))

        seconds = size(5, 60) if self.has_seconds else 1
        minutes, hours = size(0, 60) * seconds, size(1, 24) * size(0, 60) * seconds
        out: list[tuple[Callable[[BoundSchedule, int], tuple[int, int]], int]] = [(_day, hours), (_hour, minutes)]
        if self.has_seconds:
            out.append((_minute, seconds))
        return out

    def _steady(self, start_ms: int, end_ms: int) -> bool:
        """Whether the zone's offset is the same from a while before
        ``start_ms`` (a tick that a gap moves, or a repeated hour, lands up
        to the change's length after it) to ``end_ms``."""
        offset = _offset(self.zone, end_ms)
        if _offset(self.zone, start_ms) != offset:
            return False
        before = _offset(self.zone, start_ms - _STEADY_MS)
        # A change within that while: steady once its length has passed.
        return before == offset or _offset(self.zone, start_ms - abs(_ms(offset - before))) == offset

    @property
    def _hash_id(self) -> str:
        # ``H`` fields spread schedules over the period, stably per actor
        # and schedule (croniter hashes this with CRC32, not Python's
        # per-process randomised hash()).
        return f"{self.actor_name}/{self.name}"

    def _cron(self, start: dt.datetime) -> croniter:
        # croniter is fed wall-clock times as if they were UTC, so it does
        # pure calendar arithmetic and never applies an offset itself.
        # Parsing is costly and the leader walks every due schedule on
        # every wake-up, so each expression is parsed once and a copy is walked from
        # ``start``; the cached parse is never advanced itself.
        hash_id = str(self._tick_key[-1])  # the identity only when a field uses H
        it = copy.copy(_parsed(self.expression, self.has_seconds, hash_id, self.day_or))
        it.set_current(start.replace(tzinfo=_UTC, fold=0), force=True)
        return it

    def _find(self, start: dt.datetime, wanted: Callable[[int], bool], *, forward: bool, fold: int) -> int:
        """Walk wall-clock ticks from ``start`` and return the first instant
        (read with ``fold``) that satisfies ``wanted``."""
        it = self._cron(start)
        while True:
            # croniter may hand back fold=1; a wall time here is a plain label.
            try:
                wall = (it.get_next(dt.datetime) if forward else it.get_prev(dt.datetime)).replace(tzinfo=None, fold=0)
            except (ValueError, OverflowError):  # the next match lies past year 9999
                if forward:
                    return NEVER
                raise
            if not forward and wall < _MIN_WALL:
                raise CronScheduleError(f"schedule {shown(self.id)} has no tick before {start.isoformat()}")
            gap = self._gap(wall)
            if gap is None:
                instant = _to_ms(wall.replace(tzinfo=self.zone, fold=fold))
            elif self.fixed_time:
                instant = gap.at_ms
            else:
                # No wall-clock time inside a gap exists: jump over it rather
                # than stepping through every tick of it.
                it = self._cron(gap.wall_end - _EPSILON if forward else gap.wall_start)
                continue
            if wanted(instant):
                return instant

    def _gap(self, wall: dt.datetime) -> _Transition | None:
        """The spring-forward transition that skips ``wall``, if any."""
        aware = wall.replace(tzinfo=self.zone, fold=0)
        if aware.astimezone(_UTC).astimezone(self.zone).replace(tzinfo=None) == wall:
            return None
        # For a skipped time, fold=1 reads it with the offset after the
        # change (an instant before it) and fold=0 with the one before.
        return self._transition(_to_ms(wall.replace(tzinfo=self.zone, fold=1)), _to_ms(aware))

    def _repeat(self, wall: dt.datetime) -> _Transition | None:
        """The fall-back transition that makes ``wall`` occur twice, if any."""
        first = _to_ms(wall.replace(tzinfo=self.zone, fold=0))
        second = _to_ms(wall.replace(tzinfo=self.zone, fold=1))
        if first >= second:
            return None
        return self._transition(first, second)

    def _transition(self, before_ms: int, after_ms: int) -> _Transition:
        """The offset change between two instants, found by bisection to the
        second (zone transitions fall on whole seconds)."""
        old = _offset(self.zone, before_ms)
        new = _offset(self.zone, after_ms)
        lo, hi = before_ms // 1000, -(-after_ms // 1000)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _offset(self.zone, mid * 1000) == old:
                lo = mid
            else:
                hi = mid
        at = dt.datetime.fromtimestamp(hi, tz=_UTC).replace(tzinfo=None)
        first, last = sorted((at + old, at + new))
        return _Transition(at_ms=hi * 1000, wall_start=first, wall_end=last)


# The tick key's latest walk: (from, to) where ``to`` is the first tick
# after every instant in [from, to).  Threads may race on it: each window
# written is true, so the worst is a walk done twice.
_NEXT_TICKS: dict[tuple[object, ...], tuple[int, int]] = {}
_NEXT_TICKS_LIMIT = 200_000
# Every walk's answer by its instant (bounded: cleared when full).
_WALKS: dict[tuple[tuple[object, ...], int], int] = {}
_WALKS_LIMIT = 65_536
# Tick keys without a schedule identity in them, shared (a few thousand;
# bounded like _NEXT_TICKS).
_NEXT_TICKS_KEYS: dict[tuple[object, ...], tuple[object, ...]] = {}


def uses_hash(expression: str) -> bool:
    """Whether a cron expression has an ``H`` field (its values then depend
    on the schedule's identity)."""
    return _hashed(" ".join(expression.split()))


@functools.lru_cache(maxsize=4096)
def _hashed(expression: str) -> bool:
    """Whether any field uses ``H``: only then does the parse depend on the
    schedule's identity, so thousands of schedules sharing an expression
    share one parse."""
    return any(field[:1] in ("H", "h") for field in expression.split(" "))


@functools.lru_cache(maxsize=100_000)
def _parsed(expression: str, has_seconds: bool, hash_id: str, day_or: bool) -> croniter:
    """A parsed expression, to be copied before walking (see ``_cron``)."""
    return croniter(expression, 0, second_at_beginning=has_seconds, hash_id=hash_id, day_or=day_or)


# Longer than any change of a zone's offset (two hours at most).
_STEADY_MS = 3 * 3_600_000


def _day(schedule: BoundSchedule, tick_ms: int) -> tuple[int, int]:
    """The local day of ``tick_ms``, as ``[start, end)`` in epoch ms."""
    local = dt.datetime.fromtimestamp(tick_ms // 1000, tz=schedule.zone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    start = tick_ms - (tick_ms % 1000) - (local - midnight) // dt.timedelta(milliseconds=1)
    return start, start + 86_400_000


def _hour(schedule: BoundSchedule, tick_ms: int) -> tuple[int, int]:
    """The local hour of ``tick_ms`` (when the offset stays)."""
    local = dt.datetime.fromtimestamp(tick_ms // 1000, tz=schedule.zone)
    start = tick_ms - (tick_ms % 1000) - (local.minute * 60 + local.second) * 1000
    return start, start + 3_600_000


def _ms(delta: dt.timedelta) -> int:
    return delta // dt.timedelta(milliseconds=1)


def _minute(schedule: BoundSchedule, tick_ms: int) -> tuple[int, int]:
    """The minute of ``tick_ms`` (every offset is whole minutes)."""
    start = tick_ms - tick_ms % 60_000
    return start, start + 60_000


def _offset(zone: dt.tzinfo, instant_ms: int) -> dt.timedelta:
    offset = dt.datetime.fromtimestamp(instant_ms / 1000, tz=zone).utcoffset()
    assert offset is not None
    return offset


def parse_timezone(value: object, *, what: str) -> dt.tzinfo:
    """Resolve an IANA zone name, or raise naming ``what`` and the value."""
    if not isinstance(value, str) or not value:
        raise CronScheduleError(f"{what}: time zone must be an IANA name such as 'Europe/Berlin', got {shown(value)}")
    if value.upper() == "UTC":
        return _UTC
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise CronScheduleError(f"{what}: unknown time zone {shown(value)}") from exc


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
    if ":" in actor_name:
        raise CronScheduleError(
            f"actor {shown(actor_name)}: a cron actor's name cannot contain ':' "
            "(it marks runtime schedules in the ledger)"
        )
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
        calling this with False.  Defaults to True.

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
        expression, has_seconds = _one_shot_label(one_shot), True
        item = dataclasses.replace(
            item, at=None, every=MIN_EVERY, offset=one_shot % MIN_EVERY, start=one_shot, end=one_shot + 1
        )
    elif item.every is not None or item.expression is None:
        where, expression = _interval(actor_name, item)
        has_seconds = True
    else:
        where = f"{_subject(actor_name)}cron {shown(item.expression)}"
        expression, has_seconds = _normalise(actor_name, item.expression)
        if item.offset != 0:
            raise CronScheduleError(f"{where}: offset= applies to every= schedules only, got {shown(item.offset)}")
    start, end = check_bounds(where, item.start, item.end)
    zone_name = item.timezone if item.timezone is not None else timezone
    zone = parse_timezone(zone_name, what=where)
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
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1):
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
    interval = item.every is not None
    fixed_time, day_or = (False, True) if interval else _shape(expression, has_seconds)
    bound = BoundSchedule(
        actor_name=actor_name,
        queue_name=queue_name,
        expression=expression,
        timezone=zone_name if zone is not _UTC else "UTC",
        name=name.strip(),
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
        zone=zone,
        has_seconds=has_seconds,
        fixed_time=fixed_time,
        day_or=day_or,
        every=item.every,
        offset=item.offset if interval else 0,
        start=start,
        end=end,
        source=source,
        revision=revision,
        at=one_shot,
        description=description,
        grace=item.grace,
        max_runtime=item.max_runtime,
        failure_threshold=item.failure_threshold,
    )
    if actor_name:
        check_hashed(where, bound)
    if signature is not None:
        _check_arguments(bound, signature)
    return bound


@functools.lru_cache(maxsize=4096)
def _shape(expression: str, has_seconds: bool) -> tuple[bool, bool]:
    """Whether a normalised expression is fixed-time (see the module
    docstring), and whether its day fields combine with OR."""
    fields = expression.split(" ")
    time_fields = fields[:3] if has_seconds else fields[:2]
    return not any(f.startswith("*") for f in time_fields), _day_or(fields[-3], fields[-1])


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
    when = dt.datetime.fromtimestamp(at_ms / 1000, tz=_UTC)
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
    if isinstance(every, bool) or not isinstance(every, int) or every < MIN_EVERY:
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
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise CronScheduleError(f"{where}: {label} must be a timezone-aware datetime, got {shown(value)}")
        ms = _to_ms(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        raise CronScheduleError(f"{where}: {label} must be epoch milliseconds (int) or a datetime, got {shown(value)}")
    if not 0 <= ms < NEVER:
        raise CronScheduleError(f"{where}: {label} must be between 1970 and 9999, got {shown(value)}")
    return ms


def _day_or(day_of_month: str, day_of_week: str) -> bool:
    # Classic cron (Vixie, Debian, cronsim): when both day fields restrict,
    # a day matching either fires; a field starting with ``*`` (``*/2``
    # too) makes the two fields combine with AND instead.
    return not any(f.startswith(("*", "?")) for f in (day_of_month, day_of_week))


def _check_ms(where: str, label: str, value: object, *, allow_none: bool, positive: bool = False) -> None:
    if value is None and allow_none:
        return
    low = 1 if positive else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
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


#: What a schedule's name may be, declared (``name=``) or runtime: a short
#: identifier, so that ids (``actor/name``, ``actor:name``) are never
#: ambiguous.  (``\Z``, not ``$``, which would also accept a trailing newline.)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
#: The rule, as errors state it.
NAME_RULE = "name must be 1 to 64 letters, digits, '_', '.' or '-' (it is part of the schedule's id)"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIELD_CHARS = re.compile(r"^[0-9A-Za-z*/,\-#?()]+$")
# croniter's ``R`` picks a random value per process: every worker would
# fire at a different time, so it is refused.
_RANDOM = re.compile(r"(?i)(^|[^a-z])r($|[^a-z])")


def _normalise(actor_name: str, expression: object) -> tuple[str, bool]:
    """Return the expression with single spaces, and whether it has seconds."""
    if not isinstance(expression, str):
        raise CronScheduleError(
            f"{_subject(actor_name, end=': ')}cron expression must be a string, got {shown(expression)} "
            f"({type(expression).__name__})"
        )
    return _normalise_text(actor_name, expression)


# Loading a large runtime set binds each schedule; most share a handful of
# expressions, and normalising one costs a croniter parse.  (An exception
# is not cached: a bad expression is checked again each time.)
@functools.lru_cache(maxsize=4096)
def _normalise_text(actor_name: str, expression: str) -> tuple[str, bool]:
    where = f"{_subject(actor_name)}cron {shown(expression)}"
    check_ascii(where, expression)
    # ASCII whitespace only: str.split() would also split on the file and
    # record separators (``\x1c``-``\x1f``), which cron does not.
    text = " ".join(_BLANKS.split(expression.strip(" \t\n\r\f\v")))
    if not text:
        raise CronScheduleError(f"{where}: the expression is empty")
    if text.startswith("@"):
        if text.lower() not in _ALIASES:
            raise CronScheduleError(f"{where}: unknown alias; use one of {', '.join(sorted(_ALIASES))}")
        text = _ALIASES[text.lower()]
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise CronScheduleError(
            f"{where}: expected 5 fields (minute hour day month weekday) or 6 with seconds first, got {len(fields)}"
        )
    for field in fields:
        if not _FIELD_CHARS.match(field):
            raise CronScheduleError(f"{where}: field {shown(field)} is not valid cron syntax")
        if _RANDOM.search(field):
            raise CronScheduleError(f"{where}: field {shown(field)}: random 'R' values differ per process; use 'H'")
    fields = canonical_fields(where, [_collapse_single_ranges(f) for f in fields])
    fields = _every_day_when_either_covers_all(fields)
    text = " ".join(fields)
    has_seconds = len(fields) == 6
    # (A hashed expression is checked again with the schedule's own hash
    # id when it is bound: H may pick a day that never comes.)
    _check_fires(where, text, has_seconds, actor_name if _hashed(text) else "")
    return text, has_seconds


def check_hashed(where: str, schedule: BoundSchedule) -> None:
    """Refuse a schedule whose ``H`` fields, with the values its own
    identity picks, never fire (``0 0 H 2 *`` where H picks the 30th)."""
    if schedule.every is None and _hashed(schedule.expression):
        _check_fires(where, schedule.expression, schedule.has_seconds, schedule._hash_id)


def _check_fires(where: str, text: str, has_seconds: bool, hash_id: str) -> None:
    """Refuse a normalised expression croniter cannot parse, or that never
    fires (as a whole, or through one of two restricted day fields)."""
    fields = text.split(" ")
    day_or = _day_or(fields[-3], fields[-1])
    if day_or:
        _check_each_day_field_fires(where, fields, has_seconds, hash_id)
    try:
        # Through the parse cache: declaring 10,000 schedules that share a
        # few expressions parses each expression once.
        it = copy.copy(_parsed(text, has_seconds, hash_id, day_or))
        it.set_current(dt.datetime(2026, 1, 1, tzinfo=_UTC), force=True)
        it.get_next(float)
    except CroniterBadDateError:
        hashed = f" (with the value H picks for {hash_id!r})" if hash_id and "/" in hash_id else ""
        raise CronScheduleError(
            f"{where}: this expression never fires{hashed} (no date matches all of its fields together)"
        ) from None
    except (CroniterError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CronScheduleError(f"{where}: {exc}") from None


_RANGE = re.compile(r"^([0-9A-Za-z]+)-([0-9A-Za-z]+)(/[0-9]+)?$")
_BLANKS = re.compile(r"[ \t\n\r\f\v]+")


def _check_each_day_field_fires(where: str, fields: list[str], has_seconds: bool, hash_id: str) -> None:
    """With both day fields restricted, refuse one that never fires on its
    own (``0 0 31 2 0``: no February has a 31st): croniter 6 refuses the
    expression, croniter 7 fires on the other field alone."""
    dom, month, dow = fields[-3], fields[-2], fields[-1]
    for side, text, other in (
        (f"day-of-month {dom!r}", " ".join([*fields[:-1], "*"]), " ".join([*fields[:-3], "*", month, dow])),
        (f"day-of-week {dow!r}", " ".join([*fields[:-3], "*", month, dow]), " ".join([*fields[:-1], "*"])),
    ):
        try:
            it = copy.copy(_parsed(text, has_seconds, hash_id, False))
            it.set_current(dt.datetime(2026, 1, 1, tzinfo=_UTC), force=True)
            it.get_next(float)
        except CroniterBadDateError:
            raise CronScheduleError(
                f"{where}: {side} never falls in month {month!r}, so only the other day field could fire, and "
                f"croniter versions disagree on that; write {other!r} if that is what you mean"
            ) from None
        except (CroniterError, ValueError, KeyError, TypeError, IndexError):
            return  # reported with the whole expression by the caller


def _every_day_when_either_covers_all(fields: list[str]) -> list[str]:
    """With both day fields restricted, classic cron fires on a day matching
    either one; if one of them matches every day (``0,*/1``, ``0-6``), every
    day fires.  croniter reads a day-of-week that covers the week as ``*``
    and then applies day-of-month alone, so spell "every day" out for it."""
    dom, dow = fields[-3], fields[-1]
    if not _day_or(dom, dow):
        return fields
    try:
        expanded = croniter(f"* * {dom} * {dow}", 0).expanded
    except (CroniterError, ValueError, KeyError, TypeError, IndexError):
        return fields  # reported with the whole expression by the caller
    if expanded[2] == ["*"] or expanded[4] == ["*"]:
        return [*fields[:-3], "*", fields[-2], "*"]
    return fields


def _collapse_single_ranges(field: str) -> str:
    """Rewrite ``5-5`` (and ``5-5/2``) as ``5``: croniter 7 expands such a
    one-value range to ``*`` (every minute instead of minute 5) or to the
    whole field stepped, while classic cron means the single value."""
    parts = []
    for part in field.split(","):
        match = _RANGE.match(part)
        if match is not None:
            low, high = match.group(1), match.group(2)
            same = int(low) == int(high) if low.isdigit() and high.isdigit() else low.lower() == high.lower()
            if same:
                part = low
        parts.append(part)
    return ",".join(parts)


def _to_ms(value: dt.datetime) -> int:
    return round(value.timestamp() * 1000)
