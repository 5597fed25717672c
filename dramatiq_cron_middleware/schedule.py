"""Schedules: parsing and validating cron expressions, and next fire times.

A :class:`Schedule` is what a user declares (an expression plus per-schedule
options).  When an actor is declared, :func:`schedules_for_actor` turns the
actor's ``cron`` option into bound schedules: validated, given a time zone
and a stable identity in the ledger.  Every time value crossing this module's
boundary is an integer number of milliseconds since the Unix epoch, so the
leader loop never handles naive datetimes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from .errors import CronScheduleError

__all__ = ["CatchUp", "Overlap", "Schedule", "CronSpec", "schedules_for_actor", "parse_timezone"]

#: How a new leader treats ticks that fell due while nobody led:
#: ``"each"`` fires every missed tick inside the window once, ``"latest"``
#: fires only the newest one, ``"none"`` fires none of them.
CatchUp = Literal["each", "latest", "none"]

#: ``"allow"`` fires every tick; ``"skip"`` records a tick as skipped while
#: the previous message of the same schedule is still queued or running.
Overlap = Literal["allow", "skip"]

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
_UTC = dt.timezone.utc


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One cron schedule of an actor, with its own options.

    Pass it as the ``cron`` actor option, alone or in a list, wherever a
    plain expression string would do::

        @dramatiq.actor(cron=[
            "0 * * * *",
            Schedule("30 1 * * *", timezone="Europe/Berlin", kwargs={"full": True}),
        ])

    Parameters:
      expression(str): A cron expression: 5 fields (minute hour
        day-of-month month day-of-week), or 6 fields whose *first* field
        is the second (``"*/10 * * * * *"`` fires every ten seconds), or
        one of the aliases ``@yearly``, ``@monthly``, ``@weekly``,
        ``@daily``, ``@hourly``.  Day-of-week 0 and 7 both mean Sunday.
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
      overlap(str): ``"allow"`` (the default) or ``"skip"``.
      options(dict): Further message options (for example ``max_retries``).
    """

    expression: str
    timezone: str | None = None
    name: str | None = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    catch_up: CatchUp | None = None
    catch_up_window: int | None = None
    jitter: int = 0
    max_age: int | None = None
    overlap: Overlap = "allow"
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


#: What the ``cron`` actor option accepts.
CronSpec = Union[str, Schedule, Sequence[Union[str, Schedule]]]


@dataclasses.dataclass(frozen=True)
class BoundSchedule:
    """A validated schedule attached to an actor; what the leader fires."""

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
    options: dict[str, Any]
    zone: dt.tzinfo = dataclasses.field(compare=False, repr=False)
    has_seconds: bool = dataclasses.field(compare=False, repr=False)

    @property
    def id(self) -> str:
        """The schedule's identity in the ledger: ``actor/name@zone``."""
        return f"{self.actor_name}/{self.name}@{self.timezone}"

    def next_after(self, instant_ms: int) -> int:
        """The first tick strictly after ``instant_ms``, in epoch ms."""
        start = dt.datetime.fromtimestamp(instant_ms / 1000, tz=self.zone)
        if not self.has_seconds:
            # croniter steps from whole minutes; truncating keeps a tick at
            # 12:00:00.000 from being returned for a start at 12:00:00.500.
            start = start.replace(second=0, microsecond=0)
        else:
            start = start.replace(microsecond=0)
        it = croniter(
            self.expression,
            start,
            second_at_beginning=self.has_seconds,
            hash_id=self._hash_id,
        )
        while True:
            tick = _to_ms(it.get_next(dt.datetime))
            if tick > instant_ms:
                return tick

    def last_before(self, instant_ms: int) -> int:
        """The last tick strictly before ``instant_ms``, in epoch ms."""
        step = 1000 if self.has_seconds else 60_000
        # Round up to the field boundary so croniter's truncation cannot
        # drop a tick that lies inside the partial second or minute.
        ceiling = -(-instant_ms // step) * step
        start = dt.datetime.fromtimestamp(ceiling / 1000, tz=self.zone)
        it = croniter(self.expression, start, second_at_beginning=self.has_seconds, hash_id=self._hash_id)
        while True:
            tick = _to_ms(it.get_prev(dt.datetime))
            if tick < instant_ms:
                return tick

    def ticks_between(self, after_ms: int, until_ms: int) -> Iterator[int]:
        """Every tick ``t`` with ``after_ms < t <= until_ms``, in order."""
        tick = self.next_after(after_ms)
        while tick <= until_ms:
            yield tick
            tick = self.next_after(tick)

    @property
    def _hash_id(self) -> str:
        # ``H`` fields spread schedules over the period, stably per actor.
        return f"{self.actor_name}/{self.name}"


def parse_timezone(value: object, *, what: str) -> dt.tzinfo:
    """Resolve an IANA zone name, or raise naming ``what`` and the value."""
    if not isinstance(value, str) or not value:
        raise CronScheduleError(f"{what}: time zone must be an IANA name such as 'Europe/Berlin', got {value!r}")
    if value.upper() == "UTC":
        return _UTC
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronScheduleError(f"{what}: unknown time zone {value!r}") from exc


def schedules_for_actor(
    actor_name: str,
    queue_name: str,
    spec: object,
    *,
    timezone: str,
    catch_up: CatchUp,
    catch_up_window: int,
) -> list[BoundSchedule]:
    """Validate an actor's ``cron`` option and bind it to the actor.

    Raises:
      CronScheduleError: naming the actor and the offending value.
    """
    items: list[object]
    if isinstance(spec, (str, Schedule)):
        items = [spec]
    elif isinstance(spec, (list, tuple)):
        items = list(spec)
        if not items:
            raise CronScheduleError(f"actor {actor_name!r}: cron= needs at least one expression, got {spec!r}")
    else:
        raise CronScheduleError(
            f"actor {actor_name!r}: cron= must be a cron expression string, a Schedule or a list of them, "
            f"got {spec!r} ({type(spec).__name__})"
        )
    bound = [
        _bind(actor_name, queue_name, item, timezone=timezone, catch_up=catch_up, catch_up_window=catch_up_window)
        for item in items
    ]
    seen: dict[str, BoundSchedule] = {}
    for schedule in bound:
        if schedule.id in seen:
            raise CronScheduleError(
                f"actor {actor_name!r}: two schedules share the identity {schedule.id!r}; give them distinct name="
            )
        seen[schedule.id] = schedule
    return bound


def _bind(
    actor_name: str,
    queue_name: str,
    item: object,
    *,
    timezone: str,
    catch_up: CatchUp,
    catch_up_window: int,
) -> BoundSchedule:
    if isinstance(item, str):
        item = Schedule(item)
    if not isinstance(item, Schedule):
        raise CronScheduleError(
            f"actor {actor_name!r}: cron= entries must be expression strings or Schedule objects, "
            f"got {item!r} ({type(item).__name__})"
        )
    where = f"actor {actor_name!r}, cron {item.expression!r}"
    expression, has_seconds = _normalise(actor_name, item.expression)
    zone_name = item.timezone if item.timezone is not None else timezone
    zone = parse_timezone(zone_name, what=where)
    name = item.name if item.name is not None else expression
    if not isinstance(name, str) or not name.strip():
        raise CronScheduleError(f"{where}: name must be a non-empty string, got {name!r}")
    policy = item.catch_up if item.catch_up is not None else catch_up
    if policy not in _CATCH_UP_POLICIES:
        raise CronScheduleError(f"{where}: catch_up must be one of {_CATCH_UP_POLICIES}, got {policy!r}")
    window = item.catch_up_window if item.catch_up_window is not None else catch_up_window
    _check_ms(where, "catch_up_window", window, allow_none=False)
    _check_ms(where, "jitter", item.jitter, allow_none=False)
    _check_ms(where, "max_age", item.max_age, allow_none=True)
    if item.overlap not in _OVERLAP_POLICIES:
        raise CronScheduleError(f"{where}: overlap must be one of {_OVERLAP_POLICIES}, got {item.overlap!r}")
    if not isinstance(item.args, (tuple, list)):
        raise CronScheduleError(f"{where}: args must be a tuple or list, got {item.args!r}")
    if not isinstance(item.kwargs, Mapping):
        raise CronScheduleError(f"{where}: kwargs must be a dict, got {item.kwargs!r}")
    if not isinstance(item.options, Mapping):
        raise CronScheduleError(f"{where}: options must be a dict, got {item.options!r}")
    for label, value in (("args", item.args), ("kwargs", item.kwargs), ("options", item.options)):
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise CronScheduleError(f"{where}: {label} must be JSON-serialisable ({exc}): {value!r}") from None
    return BoundSchedule(
        actor_name=actor_name,
        queue_name=queue_name,
        expression=expression,
        timezone=zone_name if zone is not _UTC else "UTC",
        name=name.strip(),
        args=tuple(item.args),
        kwargs=dict(item.kwargs),
        catch_up=policy,
        catch_up_window=window,
        jitter=item.jitter,
        max_age=item.max_age,
        overlap=item.overlap,
        options=dict(item.options),
        zone=zone,
        has_seconds=has_seconds,
    )


def _check_ms(where: str, label: str, value: object, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CronScheduleError(f"{where}: {label} must be a non-negative number of milliseconds, got {value!r}")


_FIELD_CHARS = re.compile(r"^[0-9A-Za-z*/,\-#?]+$")


def _normalise(actor_name: str, expression: object) -> tuple[str, bool]:
    """Return the expression with single spaces, and whether it has seconds."""
    if not isinstance(expression, str):
        raise CronScheduleError(
            f"actor {actor_name!r}: cron expression must be a string, got {expression!r} ({type(expression).__name__})"
        )
    where = f"actor {actor_name!r}, cron {expression!r}"
    text = " ".join(expression.split())
    if not text:
        raise CronScheduleError(f"{where}: the expression is empty")
    text = _ALIASES.get(text.lower(), text)
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise CronScheduleError(
            f"{where}: expected 5 fields (minute hour day month weekday) or 6 with seconds first, got {len(fields)}"
        )
    for field in fields:
        if not _FIELD_CHARS.match(field):
            raise CronScheduleError(f"{where}: field {field!r} is not valid cron syntax")
    has_seconds = len(fields) == 6
    try:
        it = croniter(
            text,
            dt.datetime(2026, 1, 1, tzinfo=_UTC),
            second_at_beginning=has_seconds,
            hash_id=actor_name,
        )
        it.get_next(float)
    except (CroniterError, ValueError, KeyError, TypeError) as exc:
        raise CronScheduleError(f"{where}: {exc}") from None
    return text, has_seconds


def _to_ms(value: dt.datetime) -> int:
    return int(round(value.timestamp() * 1000))
