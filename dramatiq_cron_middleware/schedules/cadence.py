"""When a schedule ticks, as a value: a :class:`Cadence` is a cron
expression in a time zone, an interval, or a one-shot, bounded by
``[start, end)``, with the arithmetic on it (the next and previous tick,
the ticks between two instants and how many there are).  cronsim's
``CronSim`` is the model: everything that decides the ticks is data of
the value, and a :class:`~.schedule.BoundSchedule` holds one.  Cadences
are interned (:func:`cadence`): the thousands of schedules that share an
expression and zone share one value.  Every instant is an int of epoch
milliseconds.

croniter matches expressions against wall-clock times only; this module
maps wall-clock ticks to instants, which is where daylight saving time is
decided (see docs/schedules.md):

- A *fixed-time* expression (none of its second, minute and hour fields
  starts with ``*``) fires once per wall-clock tick: in a fall-back
  repeated hour only at the first occurrence, and a tick inside a
  spring-forward gap at the first instant after the gap.
- Any other expression repeats within the hour and fires by elapsed time:
  through both occurrences of a repeated hour, and never at wall-clock
  times that a gap skips.

An *interval* (``every``, ``offset``) ticks at ``k * every + offset`` for
every integer ``k``, counted from the Unix epoch, so every process (and
every host) agrees on its ticks without any shared state, and no time
zone or DST rule applies.  A *one-shot* (``at``) is the one-second
interval whose only tick in ``[at, at + 1)`` is ``at``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import functools
import hashlib
from collections.abc import Callable, Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from ..errors import CronScheduleError, shown
from .expression import cron_shape, parsed, picked
from .instants import NEVER, UTC

__all__ = ["MIN_EVERY", "Cadence", "cadence", "parse_timezone"]

#: The shortest interval of ``Schedule(every=...)``, in milliseconds.
MIN_EVERY = 1000

_EPSILON = dt.timedelta(microseconds=1)
_MS = dt.timedelta(milliseconds=1)
# croniter yields nothing before this; walking further back means the
# expression has no earlier match.
_MIN_WALL = dt.datetime(1971, 1, 1)


@dataclasses.dataclass(frozen=True)
class _Transition:
    """One change of a zone's UTC offset, and the wall-clock span it skips
    (offset grows) or repeats (offset shrinks): ``[wall_start, wall_end)``."""

    at_ms: int
    wall_start: dt.datetime
    wall_end: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Cadence:
    """When a schedule ticks (see the module docstring); build it with
    :func:`cadence`, which shares equal values.

    ``expression`` is the normalised cron expression, or an interval's
    label (``"every 60000 ms"``), or a one-shot's (``"once at ..."``).
    ``timezone`` is the zone's name (``"UTC"`` for UTC); for an interval
    it only formats ``cron_tick``.  A one-shot's ``every``, ``offset``,
    ``start`` and ``end`` follow from ``at``.  ``hash_id`` is the identity
    ``H`` fields hash (``actor/name``: croniter hashes it with CRC32, not
    Python's per-process randomised ``hash()``), empty when no field uses
    ``H``.
    """

    expression: str
    timezone: str
    every: int | None = None
    offset: int = 0
    start: int | None = None
    end: int | None = None
    at: int | None = None
    hash_id: str = dataclasses.field(default="", compare=False, repr=False)
    zone: dt.tzinfo = dataclasses.field(init=False, compare=False, repr=False)
    has_seconds: bool = dataclasses.field(init=False, compare=False, repr=False)
    fixed_time: bool = dataclasses.field(init=False, compare=False, repr=False)
    day_or: bool = dataclasses.field(init=False, compare=False, repr=False)
    # Caches, filled on first use.
    _shape: str | None = dataclasses.field(default=None, init=False, compare=False, repr=False)
    _key: tuple[object, ...] | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.at is not None:  # one tick: [at, at + 1) of a one-second interval
            for field, value in (("every", MIN_EVERY), ("offset", self.at % MIN_EVERY), ("start", self.at)):
                object.__setattr__(self, field, value)
            object.__setattr__(self, "end", self.at + 1)
        interval = self.every is not None
        has_seconds = interval or self.expression.count(" ") == 5
        fixed_time, day_or = (False, True) if interval else cron_shape(self.expression, has_seconds)
        object.__setattr__(self, "zone", _zone(self.timezone))
        object.__setattr__(self, "has_seconds", has_seconds)
        object.__setattr__(self, "fixed_time", fixed_time)
        object.__setattr__(self, "day_or", day_or)

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
        key = self.tick_key
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
    def tick_key(self) -> tuple[object, ...]:
        """What decides the ticks of a cron cadence: cadences sharing it
        share their walks."""
        cached = self._key
        if cached is None:
            hashed = picked(self.expression, self.has_seconds, self.hash_id, self.day_or)
            cached = (self.expression, self.has_seconds, self.day_or, self.timezone, self.fixed_time, hashed)
            if not self.hash_id:  # one tuple for the thousands of schedules sharing it
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
        if not self.fixed_time and self.zone is not UTC:
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
            raise CronScheduleError(f"no tick before {instant_ms}: it starts at {self.start}")
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
        if not self.fixed_time and self.zone is not UTC:
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

    def _blocks(self) -> list[tuple[Callable[[Cadence, int], tuple[int, int]], int]]:
        """The local day, hour and (with seconds) minute, each with how
        many ticks it holds when it fires and the offset stays."""
        fields = self._cron(dt.datetime(2000, 1, 1)).expanded

        def size(index: int, full: int) -> int:
            return full if fields[index] == ["*"] else len(set(fields[index]))

        seconds = size(5, 60) if self.has_seconds else 1
        minutes, hours = size(0, 60) * seconds, size(1, 24) * size(0, 60) * seconds
        out: list[tuple[Callable[[Cadence, int], tuple[int, int]], int]] = [(_day, hours), (_hour, minutes)]
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
        return before == offset or _offset(self.zone, start_ms - abs(offset - before) // _MS) == offset

    def _cron(self, start: dt.datetime) -> croniter:
        # croniter is fed wall-clock times as if they were UTC, so it does
        # pure calendar arithmetic and never applies an offset itself.
        # Parsing is costly and the leader walks every due schedule on
        # every wake-up, so each expression is parsed once and a copy is walked from
        # ``start``; the cached parse is never advanced itself.
        it = copy.copy(parsed(self.expression, self.has_seconds, self.hash_id, self.day_or))
        it.set_current(start.replace(tzinfo=UTC, fold=0), force=True)
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
                raise CronScheduleError(f"{shown(self.expression)} has no tick before {start.isoformat()}")
            gap = self._gap(wall)
            if gap is None:
                instant = _wall_ms(wall.replace(tzinfo=self.zone, fold=fold))
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
        if aware.astimezone(UTC).astimezone(self.zone).replace(tzinfo=None) == wall:
            return None
        # For a skipped time, fold=1 reads it with the offset after the
        # change (an instant before it) and fold=0 with the one before.
        return self._transition(_wall_ms(wall.replace(tzinfo=self.zone, fold=1)), _wall_ms(aware))

    def _repeat(self, wall: dt.datetime) -> _Transition | None:
        """The fall-back transition that makes ``wall`` occur twice, if any."""
        first = _wall_ms(wall.replace(tzinfo=self.zone, fold=0))
        second = _wall_ms(wall.replace(tzinfo=self.zone, fold=1))
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
        at = dt.datetime.fromtimestamp(hi, tz=UTC).replace(tzinfo=None)
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


# Longer than any change of a zone's offset (two hours at most).
_STEADY_MS = 3 * 3_600_000


def _day(cadence: Cadence, tick_ms: int) -> tuple[int, int]:
    """The local day of ``tick_ms``, as ``[start, end)`` in epoch ms."""
    local = dt.datetime.fromtimestamp(tick_ms // 1000, tz=cadence.zone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    start = tick_ms - (tick_ms % 1000) - (local - midnight) // _MS
    return start, start + 86_400_000


def _hour(cadence: Cadence, tick_ms: int) -> tuple[int, int]:
    """The local hour of ``tick_ms`` (when the offset stays)."""
    local = dt.datetime.fromtimestamp(tick_ms // 1000, tz=cadence.zone)
    start = tick_ms - (tick_ms % 1000) - (local.minute * 60 + local.second) * 1000
    return start, start + 3_600_000


def _minute(cadence: Cadence, tick_ms: int) -> tuple[int, int]:
    """The minute of ``tick_ms`` (every offset is whole minutes)."""
    start = tick_ms - tick_ms % 60_000
    return start, start + 60_000


def _offset(zone: dt.tzinfo, instant_ms: int) -> dt.timedelta:
    offset = dt.datetime.fromtimestamp(instant_ms / 1000, tz=zone).utcoffset()
    assert offset is not None
    return offset


@functools.lru_cache(maxsize=65_536)
def cadence(
    expression: str,
    timezone: str,
    every: int | None = None,
    offset: int = 0,
    start: int | None = None,
    end: int | None = None,
    at: int | None = None,
    hash_id: str = "",
) -> Cadence:
    """The :class:`Cadence` of these (checked) parts, one value for equal
    parts: a leader may hold a large runtime set, most of it sharing a few
    expressions and zones."""
    return Cadence(expression, timezone, every, offset, start, end, at, hash_id)


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> dt.tzinfo:
    return parse_timezone(name, what="schedule")


def parse_timezone(value: object, *, what: str, known: bool = True) -> dt.tzinfo:
    """Resolve an IANA zone name, or raise naming ``what`` and the value.
    With ``known=False``, a well-formed name that this machine's zone
    database lacks is UTC: a Schedule built on its own leaves that finding
    to its binding, whose error names the actor."""
    if not isinstance(value, str) or not value:
        raise CronScheduleError(f"{what}: time zone must be an IANA name such as 'Europe/Berlin', got {shown(value)}")
    if value.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(value)
    except ZoneInfoNotFoundError as exc:
        if not known:
            return UTC
        raise CronScheduleError(f"{what}: unknown time zone {shown(value)}") from exc
    except (ValueError, OSError) as exc:
        raise CronScheduleError(f"{what}: unknown time zone {shown(value)}") from exc


def _wall_ms(value: dt.datetime) -> int:
    # A wall-clock tick read in its zone: whole seconds, so no rounding
    # question arises (see instants.py for the rule on instants people give).
    return round(value.timestamp() * 1000)
