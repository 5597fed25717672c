"""The scheduler's clock: Redis server time, carried forward by the local
monotonic clock, never ahead of the server and deaf to its steps.

Ticks are judged against Redis ``TIME`` so that every candidate, on every
host, agrees on what "now" is, whatever its own wall clock says; between
round trips the local monotonic clock (which never jumps) carries the
estimate forward.

Two rules keep the estimate from firing anything early:

- A reply tells the server's time at some instant between sending and
  receiving.  The estimate anchors at the *receive* instant, the lower
  bound: a reply delayed by a stalled Redis makes the clock lag, never
  lead.  A later reply only moves the anchor when it is inconsistent with
  it.
- A jump of the server's clock against the monotonic clock (an NTP step,
  an operator's ``date -s``) of more than ``step_ms`` is a *clock step*.
  The clock keeps a *timeline* carried by the monotonic clock, and follows
  a step, either way, only when the step brings the server closer to this
  host's wall clock (a correction).  Firing uses the earlier of the
  timeline and the server's time (:meth:`ServerClock.now_ms`): a Redis
  host whose clock jumps an hour ahead fires nothing early, and one whose
  clock jumps back is not asked for ticks it has not reached (the claim
  script would refuse them).  Judging whether a ledger entry lies in the
  future uses the later of the two (:meth:`ServerClock.trusted_ms`): after a
  backward step the genuine entries of the last seconds are not mistaken
  for artefacts of a forward one.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable

__all__ = ["WALL_VOUCH_MS", "ClockStep", "ServerClock", "StepKind"]

#: How far ahead of the Redis timeline this host's wall clock may vouch for
#: a ledger entry (:meth:`ServerClock.trusted_ms`).  The wall clock covers a
#: backward step of Redis's clock that this process never saw (it started
#: after it); it must not make an entry a host clock far ahead agrees with
#: look genuine, or that schedule stays silent until the entry's tick.  So
#: a Redis clock stepped back further than this, seen by no running
#: process, may fire its last ticks again, and a bogus entry at most this
#: far ahead delays its schedule at most this long.
WALL_VOUCH_MS = 300_000


class StepKind(str, enum.Enum):
    """What the clock did about a step of the server's clock."""

    #: The server's clock went back, away from this host's wall clock: the
    #: timeline keeps going; ticks wait for the server to reach them.
    BACKWARD = "backward"
    #: The server's clock went back, towards this host's wall clock; followed.
    BACKWARD_FOLLOWED = "backward_followed"
    #: The server's clock went ahead, towards this host's wall clock; followed.
    FORWARD_FOLLOWED = "forward_followed"
    #: The server's clock went ahead, away from this host's wall clock:
    #: ignored, the estimate keeps its own timeline.
    FORWARD_IGNORED = "forward_ignored"
    #: The server's clock is back in line with the estimate's timeline.
    BACK_IN_LINE = "back_in_line"


@dataclasses.dataclass(frozen=True)
class ClockStep:
    """A detected step: its kind and size (server minus estimate, ms)."""

    kind: StepKind
    delta_ms: int

    def describe(self) -> str:
        """The one line an operator reads about this step."""
        seconds = f"{self.delta_ms / 1000:+.1f} s"
        return {
            StepKind.FORWARD_IGNORED: (
                f"The Redis server's clock jumped {seconds} against this process's monotonic clock and away "
                "from its wall clock; ignoring the jump (nothing fires early) until Redis is back in line."
            ),
            StepKind.FORWARD_FOLLOWED: (
                f"The Redis server's clock jumped {seconds}, towards this host's wall clock; following it."
            ),
            StepKind.BACKWARD: (
                f"The Redis server's clock jumped {seconds} (backwards, away from this host's wall clock): "
                "ticks already decided are not repeated, and the next ones fire once Redis's clock reaches them."
            ),
            StepKind.BACKWARD_FOLLOWED: (
                f"The Redis server's clock jumped {seconds}, back towards this host's wall clock; following it."
            ),
            StepKind.BACK_IN_LINE: "The Redis server's clock is back in line with this process's clock.",
        }[self.kind]


class ServerClock:
    """Redis server time estimated locally, in epoch milliseconds.

    Parameters:
      monotonic: The local monotonic clock in seconds (injected in tests).
      wall: The local wall clock in seconds, consulted only to tell a
        correcting step from a wrong one.
      step_ms: The smallest disagreement, in milliseconds, that counts as a
        step of the server's clock.  Defaults to 1000.
      on_step: Called (with the lock released) once per detected step and
        once when the server comes back in line.
    """

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        step_ms: int = 1000,
        on_step: Callable[[ClockStep], None] | None = None,
    ) -> None:
        self.monotonic = monotonic
        self._wall = wall
        self._step = step_ms
        self._on_step = on_step
        self._lock = threading.Lock()
        # server ms minus monotonic ms, on our timeline: the timeline is
        # monotonic ms + offset.
        self._offset: float | None = None
        # The latest server reading (lower bound), as an offset.
        self._server: float | None = None
        # While a step is ignored: the server's offset we ignore.
        self._ignored: float | None = None
        #: How many server readings were observed (each one a reply).
        self.observations = 0

    @property
    def synced(self) -> bool:
        """Whether the clock has seen the server at least once."""
        return self._offset is not None

    @property
    def ignoring_step(self) -> bool:
        """Whether a step of the server's clock is being ignored."""
        return self._ignored is not None

    def observe(self, server_ms: int, sent: float, received: float) -> ClockStep | None:
        """Record the server time a round trip sent and received at the
        given monotonic instants (seconds) read; returns the step it
        revealed, if any."""
        low = server_ms - max(received, sent) * 1000
        high = server_ms - sent * 1000
        event: ClockStep | None = None
        with self._lock:
            self.observations += 1
            current = self._offset
            self._server = low
            if current is None:
                self._offset = low
            elif high < current - self._step or low > current + self._step:
                forward = low > current
                seen = low if forward else high
                if self._ignored is not None and abs(seen - self._ignored) <= self._step:
                    pass  # the same step, already reported
                elif self._corrects(seen, current):
                    self._offset, self._ignored = low, None
                    kind = StepKind.FORWARD_FOLLOWED if forward else StepKind.BACKWARD_FOLLOWED
                    event = ClockStep(kind, int(seen - current))
                else:
                    self._ignored = seen
                    kind = StepKind.FORWARD_IGNORED if forward else StepKind.BACKWARD
                    event = ClockStep(kind, int(seen - current))
            else:
                if self._ignored is not None:
                    self._ignored = None
                    event = ClockStep(StepKind.BACK_IN_LINE, int(low - current))
                if not low <= current <= high:
                    # Drift (or a slow first reply): move to the lower bound.
                    self._offset = low
        if event is not None and self._on_step is not None:
            self._on_step(event)
        return event

    def _corrects(self, server_offset: float, current: float) -> bool:
        wall_offset = self._wall() * 1000 - self.monotonic() * 1000
        return abs(server_offset - wall_offset) + self._step <= abs(current - wall_offset)

    def now_ms(self) -> int:
        """The time to fire by: the earlier of the timeline and the server's
        time, so no tick is asked for before its instant on either.  Before
        the first observation, the local wall clock stands in."""
        return int(self.precise_ms())

    def precise_ms(self) -> float:
        """:meth:`now_ms` without rounding down to the millisecond (to wake
        up at a tick, not up to a millisecond after it)."""
        with self._lock:
            offset, server = self._offset, self._server
        if offset is None or server is None:
            return self._wall() * 1000
        return self.monotonic() * 1000 + min(offset, server)

    def trusted_ms(self) -> int:
        """The latest time anything could have been decided at: the later of
        the timeline, the server's time and this host's wall clock (the
        wall clock at most :data:`WALL_VOUCH_MS` ahead of the other two).  A
        ledger entry after it cannot have been fired (claims are never
        granted early); one before it may be genuine however the server's
        clock reads now."""
        with self._lock:
            offset, server = self._offset, self._server
        wall = self._wall() * 1000
        if offset is None or server is None:
            return int(wall)
        timeline = self.monotonic() * 1000 + max(offset, server)
        return int(max(timeline, min(wall, timeline + WALL_VOUCH_MS)))
