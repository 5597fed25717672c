"""A schedule's recent history as small inline SVGs: one mark per tick,
its height the fire lag, its colour the outcome; and one mark per run, its
height the run's duration, its colour the run's outcome.

Drawn on the server as plain markup (no script, no external file), so it
shows with JavaScript off and inside any page.  Every value placed in the
markup is a number or one of the known outcome names; titles go through
``html.escape`` all the same.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..monitoring.records import RunRecord
from ..schedules.outcome import Outcome
from ..times import span, when

if TYPE_CHECKING:
    from ..store.operator import HistoryEntry

__all__ = ["OUTCOME_COLOURS", "RUN_COLOURS", "duration_chart", "lag_chart"]

#: Colour of each outcome, shared with the page's legend and badges.
OUTCOME_COLOURS: dict[str, str] = {
    Outcome.FIRED: "#2e7d32",
    Outcome.CAUGHT_UP: "#f9a825",
    Outcome.MISSED: "#c62828",
    Outcome.SKIPPED: "#6d4c41",
    Outcome.PAUSED: "#757575",
    Outcome.TRIGGERED: "#1565c0",
    Outcome.LEDGER_LOST: "#4a148c",
    Outcome.REBASED: "#00838f",
    Outcome.DROPPED: "#ad1457",
}

#: Colour of each run outcome, shared with the runs table's badges.
RUN_COLOURS: dict[str, str] = {
    "pending": "#9e9e9e",
    "running": "#1565c0",
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "retrying": "#f9a825",
    "dropped": "#ad1457",
    "lost": "#4a148c",
}

_WIDTH, _HEIGHT, _PAD = 640, 120, 24


def lag_chart(entries: Sequence[HistoryEntry]) -> str:
    """An SVG of ``entries`` (any order), oldest on the left."""
    points = sorted(entries, key=lambda e: (e.at_ms, e.entry_id))
    if not points:
        return ""
    marks = [
        (OUTCOME_COLOURS.get(e.outcome, "#9e9e9e"), e.outcome, e.lag_ms, f"{when(e.tick_ms)} {e.outcome}", "+")
        for e in points
    ]
    title = f"Fire lag and outcome of the last {len(points)} ticks"
    return _bars(marks, title=title, measure="fire lag", first=points[0].at_ms, last=points[-1].at_ms)


def duration_chart(runs: Sequence[RunRecord]) -> str:
    """An SVG of ``runs`` (any order), oldest tick on the left: each run's
    duration, coloured by its outcome (a run without one, still open or
    dropped, is a short mark at the baseline)."""
    points = sorted(runs, key=lambda r: (r.tick_ms, r.attempt))
    if not points:
        return ""
    marks = [
        (RUN_COLOURS.get(r.outcome, "#9e9e9e"), r.outcome, r.duration_ms, f"{when(r.tick_ms)} {r.outcome}", "")
        for r in points
    ]
    title = f"Duration and outcome of the last {len(points)} runs"
    return _bars(marks, title=title, measure="duration", first=points[0].tick_ms, last=points[-1].tick_ms)


def _bars(
    marks: Sequence[tuple[str, str, int | None, str, str]], *, title: str, measure: str, first: int, last: int
) -> str:
    """The chart: one bar per ``(colour, outcome, value ms or None, title,
    value sign)``, at most 10 ms tall, so values within a millisecond show
    as low bars rather than bars at full height."""
    top = max([v for _, _, v, _, _ in marks if v is not None] + [10])
    width = _WIDTH - 2 * _PAD
    height = _HEIGHT - 2 * _PAD
    step = width / max(len(marks) - 1, 1)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{html.escape(title)}</title>",
        f'<line x1="{_PAD}" y1="{_HEIGHT - _PAD}" x2="{_WIDTH - _PAD}" y2="{_HEIGHT - _PAD}" class="axis"/>',
        f'<text x="{_PAD}" y="{_PAD - 8}" class="label">{html.escape(measure)}, 0 to {html.escape(span(top))}</text>',
        f'<text x="{_PAD}" y="{_HEIGHT - 6}" class="label">{html.escape(when(first))}</text>',
        f'<text x="{_WIDTH - _PAD}" y="{_HEIGHT - 6}" class="label" text-anchor="end">{html.escape(when(last))}</text>',
    ]
    bar = max(min(step * 0.7, 12), 2)
    for index, (colour, outcome, value, label, sign) in enumerate(marks):
        x = _PAD + index * step - bar / 2 if len(marks) > 1 else _PAD + width / 2 - bar / 2
        # Marks without a value get a short fixed mark at the baseline, so
        # a paused or missed stretch is visible as a band of colour.
        h = 4.0 if value is None else max(height * value / top, 2.0)
        y = _HEIGHT - _PAD - h
        text = label + ("" if value is None else f" {sign}{span(value)}")
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour}" '
            f'data-outcome="{html.escape(outcome)}"><title>{html.escape(text)}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)
