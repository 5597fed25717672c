"""The scheduler's clock: Redis server time, carried forward by the local
monotonic clock.

Ticks are judged against Redis ``TIME`` so that every candidate, on every
host, agrees on what "now" is, whatever its own wall clock says; between
round trips the local monotonic clock (which never jumps) carries the
estimate forward.  Every lease and ledger script returns the server time,
so the anchor is refreshed at least once per renewal.
"""

from __future__ import annotations

import threading
import time

__all__ = ["Clock"]


class Clock:
    """Redis server time estimated locally, in epoch milliseconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._anchor_server_ms: float | None = None
        self._anchor_mono: float = 0.0
        self._rtt: float = float("inf")

    def observe(self, server_ms: int, sent_mono: float, received_mono: float) -> None:
        """Record a server time read by a round trip sent and received at
        the given monotonic instants.  The midpoint of the round trip is
        the best local estimate of when the server read its clock."""
        rtt = max(received_mono - sent_mono, 0.0)
        with self._lock:
            self._anchor_server_ms = float(server_ms)
            self._anchor_mono = (sent_mono + received_mono) / 2
            self._rtt = rtt

    @property
    def synced(self) -> bool:
        """Whether the clock has seen the server at least once."""
        return self._anchor_server_ms is not None

    def now_ms(self) -> int:
        """The estimated server time now.  Before the first observation,
        the local wall clock stands in."""
        with self._lock:
            if self._anchor_server_ms is None:
                return int(time.time() * 1000)
            return int(self._anchor_server_ms + (time.monotonic() - self._anchor_mono) * 1000)
