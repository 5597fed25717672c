"""Instants and durations: the one reading of what people and code write
for a point in time or a length of time, for ``Schedule(start=, end=, at=)``,
the CLI, the dashboard's forms, ``pause(until=, for_=)``, backfills and the
simulator's clock alike.

One rounding rule: a ``datetime`` or ``timedelta`` is cut to the whole
millisecond *at or before* it (floor), by exact integer arithmetic, never
through a float (a float timestamp loses a millisecond now and then:
``2460-05-21T11:04:09.994Z`` is 15475143849993.999... ms as a float).
"""

from __future__ import annotations

import datetime as dt
import re

from ..errors import shown
from ..times import iso

__all__ = ["NEVER", "UTC", "duration_ms", "instant_ms", "pause_expiry"]

#: 9999-01-01T00:00:00Z in epoch ms: later than any tick a schedule
#: returns, and still a ``datetime`` in every time zone (see
#: :meth:`.cadence.Cadence.next_after`).  Instants are read in ``[0, NEVER)``.
NEVER = 253_370_764_800_000
UTC = dt.timezone.utc

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_MS = dt.timedelta(milliseconds=1)
_DURATION = re.compile(r"(\d+)(ms|d|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def instant_ms(value: object, *, text: bool = True, what: str = "an instant") -> int:
    """An instant in epoch ms, from 1970 to 9999: an aware ``datetime``,
    an int of epoch ms, or (with ``text``) ISO 8601 with its offset
    (``2026-12-24T09:00+01:00``, ``...Z``) or epoch ms as ASCII digits
    (``"١٢٣"`` is not a number here, though Python's ``int`` reads it).

    Raises:
      ValueError: naming ``what`` and the value (shortened), when it is
        none of those.
    """
    if isinstance(value, str) and text:
        stripped = value.strip()
        try:
            value = int(stripped) if stripped.isascii() and stripped.isdigit() else _parse_iso(stripped)
        except ValueError:
            raise ValueError(
                f"cannot read {shown(stripped)} as an instant: write ISO 8601 with its offset "
                "(2026-12-24T09:00+01:00) or epoch ms"
            ) from None
    if isinstance(value, dt.datetime):
        if value.utcoffset() is None:
            raise ValueError(
                f"{what} must be a timezone-aware datetime: {value.isoformat()!r} needs a time zone offset"
            )
        try:
            ms = (value - _EPOCH) // _MS
        except OverflowError:  # 0001-01-01T00:00+14:00 is in year 0 in UTC
            ms = -1
        shown_value: object = value.isoformat()
    elif isinstance(value, int) and not isinstance(value, bool):
        ms, shown_value = value, value
    else:
        kinds = "an aware datetime, epoch ms or ISO 8601 text" if text else "epoch milliseconds (int) or a datetime"
        raise ValueError(f"{what} must be {kinds}, got {shown(value)}")
    if not 0 <= ms < NEVER:
        raise ValueError(f"{what} must be between 1970 and 9999, got {shown(shown_value)}")
    return ms


def _parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def duration_ms(value: object, *, positive: bool = True) -> int:
    """A duration in ms: an int of ms, a ``timedelta``, or a text people
    write (``2h``, ``90m``, ``1h30m``, ``45s``, ``1d``, ``500ms``).  It must
    be positive, or with ``positive=False`` at least 0.

    Raises:
      ValueError: naming the value, when it is none of those.
    """
    if isinstance(value, str):
        lowered = value.strip().lower()
        parts = _DURATION.findall(lowered)
        if not parts or "".join(n + u for n, u in parts) != lowered:
            raise ValueError(f"cannot read {shown(value)} as a duration: write it like 2h, 90m, 1h30m, 45s or 1d")
        ms = sum(int(n) * _UNIT_MS[u] for n, u in parts)
    elif isinstance(value, dt.timedelta):
        ms = value // _MS
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    else:
        ms = -1
    if ms < (1 if positive else 0):
        kind = "a positive" if positive else "a non-negative"
        raise ValueError(f"a duration must be {kind} int of ms, a timedelta or a text like 2h, got {shown(value)}")
    return ms


def pause_expiry(now_ms: int, *, until: object = None, duration: object = None) -> int | None:
    """When a pause given ``until`` or ``duration`` ends, in epoch ms (None:
    until resumed), for the CLI, the API and the dashboard alike.

    Parameters:
      now_ms: Redis's time (the scheduler's clock).
      until: An aware ``datetime``, epoch milliseconds, or an ISO 8601
        text with its offset (``2026-12-24T09:00+01:00``, ``...Z``).
      duration: Milliseconds, a ``timedelta``, or a text such as ``2h``,
        ``90m``, ``1h30m``.

    Raises:
      ValueError: naming the value: both given, unreadable, not positive,
        or an instant not after ``now_ms``.
    """
    if until is not None and duration is not None:
        raise ValueError(f"give a pause's end or its duration, not both (got until={until!r}, for={duration!r})")
    if duration is not None:
        return now_ms + duration_ms(duration)
    if until is None:
        return None
    try:
        until = instant_ms(until)
    except ValueError as exc:
        raise ValueError(f"a pause's end: {exc}") from None
    if until <= now_ms:
        raise ValueError(f"a pause's end must be in the future, got {iso(until)} (Redis's time is {iso(now_ms)})")
    return until
