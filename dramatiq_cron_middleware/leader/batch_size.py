"""How many claims the next batch may hold: as many as fit a share of the
renewal interval at the pace the batches go on this machine.

The leader renews only between batches, so a batch must end well before
the lease does.  No fixed size is right on every machine: 1,000 claims take
about 0.15 s on an idle one and seconds on a loaded one, longer than a
short lease.  So every batch is timed (from planning to its last enqueue)
and the next is sized to last at most :data:`SHARE` of the renewal
interval at the time per claim seen: a slower batch counts at once, a
faster one at most halves the figure.  Until batches were timed nothing is
known, so sizes start at one claim and at most double from the largest
batch that kept to its budget.  With a renewal sent before any batch that
could run past the renewal point (see firing.py), a batch must take five
times its estimate to reach the firing deadline.
"""

from __future__ import annotations

__all__ = ["MEASURED_FROM", "SHARE", "BatchSize"]

#: The share of the renewal interval a batch is sized to last.
SHARE = 0.25

#: Below this many claims a batch's time is mostly its round trip: it
#: counts only when it shows claims slower than the budget allows.
MEASURED_FROM = 32


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
        per_claim = seconds / claims
        if claims >= MEASURED_FROM or per_claim * MEASURED_FROM > self.budget:
            self.pace = max(per_claim, self.pace / 2)
        if seconds <= self.budget:
            self.proven = max(self.proven, claims)
