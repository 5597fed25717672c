"""How instants and durations are written for people, by the ``dramatiq-cron``
command, the dashboard and the JSON documents alike (``2026-11-29
21:41:56Z``, ``12.3s``, ``4m05s``)."""

from __future__ import annotations

import datetime as dt

__all__ = ["iso", "short_when", "span", "when"]

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
