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
  an operator's ``date -s``) of more than ``step_ms`` is a *clock step*.  A
  step backwards is followed (the claim script refuses ticks after the
  server's time anyway).  A step forwards is followed only when it brings
  the server closer to this host's wall clock (a correction); otherwise the
  estimate keeps its own timeline until the server comes back in line, so
  a Redis host whose clock jumps an hour ahead fires nothing early.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable

__all__ = ["ClockStep", "ServerClock", "StepKind"]


class StepKind(str, enum.Enum):
    """What the clock did about a step of the server's clock."""

    #: The server's clock went back; followed.
    BACKWARD = "backward"
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
        self.on_step = on_step
        self._lock = threading.Lock()
        # server ms minus monotonic ms: the estimate is monotonic ms + offset.
        self._offset: float | None = None
        # While a forward step is ignored: the server's offset we ignore.
        self._ignored: float | None = None

    @property
    def synced(self) -> bool:
        """Whether the clock has seen the server at least once."""
        return self._offset is not None

    @property
    def ignoring_step(self) -> bool:
        """Whether a forward step of the server's clock is being ignored."""
        return self._ignored is not None

    def observe(self, server_ms: int, sent: float, received: float) -> ClockStep | None:
        """Record the server time a round trip sent and received at the
        given monotonic instants (seconds) read; returns the step it
        revealed, if any."""
        low = server_ms - max(received, sent) * 1000
        high = server_ms - sent * 1000
        event: ClockStep | None = None
        with self._lock:
            current = self._offset
            if current is None:
                self._offset = low
            elif high < current - self._step:
                self._offset, self._ignored = low, None
                event = ClockStep(StepKind.BACKWARD, int(high - current))
            elif low > current + self._step:
                if self._ignored is not None and abs(low - self._ignored) <= self._step:
                    pass  # the same step, already reported
                elif self._corrects(low, current):
                    self._offset, self._ignored = low, None
                    event = ClockStep(StepKind.FORWARD_FOLLOWED, int(low - current))
                else:
                    self._ignored = low
                    event = ClockStep(StepKind.FORWARD_IGNORED, int(low - current))
            else:
                if self._ignored is not None:
                    self._ignored = None
                    event = ClockStep(StepKind.BACK_IN_LINE, int(low - current))
                if not low <= current <= high:
                    # Drift (or a slow first reply): move to the lower bound.
                    self._offset = low
        if event is not None and self.on_step is not None:
            self.on_step(event)
        return event

    def _corrects(self, server_offset: float, current: float) -> bool:
        wall_offset = self._wall() * 1000 - self.monotonic() * 1000
        return abs(server_offset - wall_offset) + self._step <= abs(current - wall_offset)

    def now_ms(self) -> int:
        """The estimated server time now.  Before the first observation,
        the local wall clock stands in."""
        with self._lock:
            offset = self._offset
        if offset is None:
            return int(self._wall() * 1000)
        return int(self.monotonic() * 1000 + offset)
