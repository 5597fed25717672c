"""How many claims the next batch may hold: as many as fit a share of the
renewal interval at the pace the batches go on this machine.

The leader renews only between batches, so a batch must end well before
the lease does.  No fixed size is right on every machine: 1,000 claims take
about 0.15 s on an idle one and seconds on a loaded one, longer than a
short lease.  So every batch is timed (from planning to its last enqueue)
and the next is sized to last at most :data:`SHARE` of the renewal
interval at the time per claim seen: a slower batch counts at once, a
faster one at most halves the figure (a small batch, mostly its round
trip, overstates it; the next ones bring it down).  Until batches were
timed nothing is known, so sizes start at one claim and at most double
from the largest batch that kept to its budget.  A renewal due during a
batch follows it, unless the batch could end more than its budget past the
renewal point (then it goes first, see firing.py): a batch must take four
times its estimate to reach the firing deadline.
"""

from __future__ import annotations

__all__ = ["SHARE", "BatchSize"]

#: The share of the renewal interval a batch is sized to last.
SHARE = 0.25


class BatchSize:
    """Batch sizes that fit a time budget, learnt from the batches timed.

    Parameters:
      renew_interval: How often the leader renews (seconds).
      limit: The most claims a batch holds, however fast they go.
    """

    def __init__(self, *, renew_interval: float, limit: int) -> None:
        self.budget = SHARE * renew_interval
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
