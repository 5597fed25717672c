"""A schedule's recent history as a small inline SVG: one mark per tick,
its height the fire lag, its colour the outcome.

Drawn on the server as plain markup (no script, no external file), so it
shows with JavaScript off and inside any page.  Every value placed in the
markup is a number or one of the known outcome names; titles go through
``html.escape`` all the same.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ..ops.control import HistoryEntry
from ..ops.format import span, when
from ..store.codes import Outcome

__all__ = ["lag_chart", "OUTCOME_COLOURS"]

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

_WIDTH, _HEIGHT, _PAD = 640, 120, 24


def lag_ms(entry: HistoryEntry) -> int | None:
    """The fire lag of an entry (claim time minus tick), when it fired."""
    if entry.outcome in (Outcome.FIRED, Outcome.CAUGHT_UP) and entry.detail.isdigit():
        return int(entry.detail)
    return None


def lag_chart(entries: Sequence[HistoryEntry]) -> str:
    """An SVG of ``entries`` (any order), oldest on the left."""
    points = sorted(entries, key=lambda e: (e.at_ms, e.entry_id))
    if not points:
        return ""
    lags = [lag_ms(e) for e in points]
    # At least 10 ms tall, so a schedule firing within a millisecond shows
    # low bars rather than bars at full height.
    top = max([v for v in lags if v is not None] + [10])
    first, last = points[0].at_ms, points[-1].at_ms
    width = _WIDTH - 2 * _PAD
    height = _HEIGHT - 2 * _PAD
    step = width / max(len(points) - 1, 1)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>Fire lag and outcome of the last {len(points)} ticks</title>",
        f'<line x1="{_PAD}" y1="{_HEIGHT - _PAD}" x2="{_WIDTH - _PAD}" y2="{_HEIGHT - _PAD}" class="axis"/>',
        f'<text x="{_PAD}" y="{_PAD - 8}" class="label">fire lag, 0 to {html.escape(span(top))}</text>',
        f'<text x="{_PAD}" y="{_HEIGHT - 6}" class="label">{html.escape(when(first))}</text>',
        f'<text x="{_WIDTH - _PAD}" y="{_HEIGHT - 6}" class="label" text-anchor="end">{html.escape(when(last))}</text>',
    ]
    bar = max(min(step * 0.7, 12), 2)
    for index, (entry, lag) in enumerate(zip(points, lags, strict=True)):
        x = _PAD + index * step - bar / 2 if len(points) > 1 else _PAD + width / 2 - bar / 2
        colour = OUTCOME_COLOURS.get(entry.outcome, "#9e9e9e")
        # Outcomes without a lag get a short fixed mark at the baseline, so
        # a paused or missed stretch is visible as a band of colour.
        h = 4.0 if lag is None else max(height * lag / top, 2.0)
        y = _HEIGHT - _PAD - h
        title = f"{when(entry.tick_ms)} {entry.outcome}" + ("" if lag is None else f" +{span(lag)}")
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour}" '
            f'data-outcome="{html.escape(entry.outcome)}"><title>{html.escape(title)}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)
