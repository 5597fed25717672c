"""How many claims the next batch may hold: as many as fit a share of the
firing deadline at the pace the batches go on this machine.

The leader renews only between batches, so a batch must end well before
its firing deadline.  No fixed size is right on every machine: 1,000 claims
take about 0.15 s on an idle one and seconds on a loaded one, longer than a
short lease.  So every batch is timed (from planning to its last enqueue,
a renewal before it left out) and the next is sized to last at most 1/:data:`MARGIN` of the firing
deadline (the time from a renewal to the step-down) at the time per claim
seen: a slower batch counts at once, a faster one at most halves the
figure (a small batch, mostly its round trip, overstates it; the next ones
bring it down).  Until batches were timed nothing is known, so sizes start
at one claim and at most double from the largest batch that kept to its
budget.  A renewal that falls due within :data:`MARGIN` such batches goes
before the batch, and one goes before every batch of a backlog after the
first (see firing.py): from one renewal to the next lies at most one
batch's work, however far a loaded machine or a collection stretches it.
"""

from __future__ import annotations

__all__ = ["MARGIN", "BatchSize"]

#: A batch is sized to last at most this fraction (its inverse) of the
#: firing deadline; the renewal goes first when it falls due within that
#: many batches.
MARGIN = 3


class BatchSize:
    """Batch sizes that fit a time budget, learnt from the batches timed.

    Parameters:
      fire_deadline: How long after a renewal the leader stops firing
        unless it renewed again (seconds).
      limit: The most claims a batch holds, however fast they go.
    """

    def __init__(self, *, fire_deadline: float, limit: int) -> None:
        self.budget = fire_deadline / MARGIN
        self.limit = limit
        #: Seconds per claim, of the slowest recent batch (decaying); 0
        #: until a batch was timed.
        self.pace = 0.0
        #: The largest batch that kept to the budget.
        self.proven = 0

    def next(self) -> int:
        """How many claims the next batch may hold (at least one)."""
        size = min(self.limit, max(1, 2 * self.proven))
        if self.pace > 0:
            size = min(size, int(self.budget / self.pace))
        return max(1, size)

    def expected(self, claims: int) -> float:
        """How long a batch of ``claims`` should take (seconds)."""
        return claims * self.pace

    def measured(self, claims: int, seconds: float) -> None:
        """A batch of ``claims`` took ``seconds``."""
        if claims <= 0:
            return
        # A small batch's time is mostly its round trip: counted per claim,
        # it overstates the pace, which the next batches bring down.
        self.pace = max(seconds / claims, self.pace / 2)
        if seconds <= self.budget:
            self.proven = max(self.proven, claims)
