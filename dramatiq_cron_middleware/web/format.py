"""How the dashboard writes times and durations: the same forms as the
``dramatiq-cron`` command (``2026-11-29 21:41:56Z``, ``12.3s``, ``4m05s``)."""

from __future__ import annotations

import datetime as dt

from ..ops.control import human_span

__all__ = ["iso", "span", "when"]

_UTC = dt.timezone.utc


def when(ms: int, zone: dt.tzinfo = _UTC) -> str:
    """An instant in a zone, to the second; UTC is written with ``Z``."""
    text = dt.datetime.fromtimestamp(ms / 1000, tz=zone).isoformat(sep=" ", timespec="seconds")
    return text.replace("+00:00", "Z")


def iso(ms: int, zone: dt.tzinfo = _UTC) -> str:
    """An instant as ISO 8601 with milliseconds (for ``<time datetime>``)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=zone).isoformat(timespec="milliseconds")


def span(ms: float) -> str:
    """A duration for people: 850ms, 12.3s, 4m05s, 2h03m, 3d04h (as the CLI
    prints it)."""
    return human_span(ms)
