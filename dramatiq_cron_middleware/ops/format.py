"""How times and durations written by people are read (``2h``, ISO 8601,
epoch ms); how they are written for people is ``times.py``'s, re-exported
here for the modules that import it from here."""

from __future__ import annotations

import datetime as dt
import re

from ..errors import shown
from ..schedules.schedule import NEVER
from ..times import iso, short_when, span, when

__all__ = ["duration_ms", "instant_ms", "iso", "short_when", "span", "when"]

_DURATION = re.compile(r"(\d+)(ms|d|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

_UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_MS = dt.timedelta(milliseconds=1)


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
