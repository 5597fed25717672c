"""How times and durations are written for people, by the ``dramatiq-cron``
command and the dashboard alike (``2026-11-29 21:41:56Z``, ``12.3s``,
``4m05s``)."""

from __future__ import annotations

import datetime as dt
import re

from ..errors import shown
from ..schedules.schedule import NEVER

__all__ = ["duration_ms", "instant_ms", "iso", "short_when", "span", "when"]

_DURATION = re.compile(r"(\d+)(ms|d|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

_UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_MS = dt.timedelta(milliseconds=1)


def when(ms: int, zone: dt.tzinfo = _UTC) -> str:
    """An instant in a zone, to the second; UTC is written with ``Z``."""
    text = _datetime(ms, zone).isoformat(sep=" ", timespec="seconds")
    return text.replace("+00:00", "Z")


def short_when(ms: int, zone: dt.tzinfo = _UTC) -> str:
    """:func:`when` for a narrow screen: ``12-01 17:41:05``, the zone left
    to the page (a schedule's zone is shown beside its times)."""
    return _datetime(ms, zone).strftime("%m-%d %H:%M:%S")


def iso(ms: int, zone: dt.tzinfo = _UTC) -> str:
    """An instant as ISO 8601 with milliseconds (for ``<time datetime>``)."""
    return _datetime(ms, zone).isoformat(timespec="milliseconds")


def _datetime(ms: int, zone: dt.tzinfo) -> dt.datetime:
    # Exact: ``fromtimestamp(ms / 1000)`` rounds through a float and now and
    # then shows a millisecond less than the instant.
    return (_EPOCH + int(ms) * _MS).astimezone(zone)


def span(ms: float) -> str:
    """A duration for people: 850ms, 12.3s, 4m05s, 2h03m, 3d04h."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def duration_ms(text: str) -> int:
    """A duration written by people (``2h``, ``90m``, ``1h30m``, ``45s``,
    ``1d``, ``500ms``) in milliseconds.

    Raises:
      ValueError: naming the text, when it is not such a positive duration.
    """
    parts = _DURATION.findall(text.strip().lower()) if isinstance(text, str) else []
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise ValueError(f"cannot read {text!r} as a duration: write it like 2h, 90m, 1h30m, 45s or 1d")
    total = sum(int(n) * _UNIT_MS[u] for n, u in parts)
    if total <= 0:
        raise ValueError(f"a duration must be positive, got {text!r}")
    return total


def instant_ms(value: object) -> int:
    """An instant written by people or code (an aware ``datetime``, epoch
    milliseconds, or ISO 8601 text with its offset) in epoch ms, from 1970
    to 9999.  Epoch ms are ASCII digits only: ``"١٢٣"`` is not a number
    here, though Python's ``int`` reads it.

    Raises:
      ValueError: naming the value (shortened), when it is none of those.
    """
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.isascii() and text.isdigit():
                value = int(text)
            else:
                value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"cannot read {shown(text)} as an instant: write ISO 8601 with its offset "
                "(2026-12-24T09:00+01:00) or epoch ms"
            ) from None
    if isinstance(value, dt.datetime):
        if value.utcoffset() is None:
            raise ValueError(f"{value.isoformat()!r} needs a time zone offset (an instant is timezone-aware)")
        try:
            # Whole milliseconds: a float timestamp would lose one now and then.
            ms = (value - _EPOCH) // _MS
        except OverflowError:  # 0001-01-01T00:00+14:00 is in year 0 in UTC
            ms = -1
        if not 0 <= ms < NEVER:
            raise ValueError(f"an instant must be between 1970 and 9999, got {value.isoformat()!r}")
        return ms
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"an instant must be an aware datetime, epoch ms or ISO 8601 text, got {shown(value)}")
    return value
