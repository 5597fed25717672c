"""Where the CLI's and the dashboard's older imports of times find them:
reading instants and durations written by people is
``schedules/instants.py``'s, writing them for people is ``times.py``'s."""

from __future__ import annotations

from ..schedules.instants import duration_ms, instant_ms
from ..times import iso, short_when, span, when

__all__ = ["duration_ms", "instant_ms", "iso", "short_when", "span", "when"]
