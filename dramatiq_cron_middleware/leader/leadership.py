"""The leader's state, and the facts that hold only while it leads."""

from __future__ import annotations

import dataclasses
import enum

from ..store.timing import Timing

__all__ = ["Expired", "Leadership", "State"]


class State(enum.Enum):
    """Where the leader thread stands.

    ``FOLLOWING`` → ``LEADING`` when an acquisition succeeds; back when
    Redis refuses the token or the firing deadline passes; either →
    ``STOPPING`` on a stop request; ``STOPPING`` → ``STOPPED`` once the
    lease is released and owed ticks had their last chance.
    """

    FOLLOWING = "following"
    LEADING = "leading"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Expired(Exception):
    """No renewal succeeded within the firing deadline: the lease may
    already have run out, so this process fires nothing more."""


@dataclasses.dataclass
class Leadership:
    """One term of leadership: exists from the acquisition to the step-down.

    Times are this process's monotonic clock (seconds).
    """

    token: str
    epoch: int
    #: When the next renewal is due.
    renew_at: float
    #: Nothing fires from then on unless a renewal succeeds first.
    deadline: float
    #: Nothing fires before then (the wait after a suspected failover).
    fire_not_before: float
    #: Whether a ledger should exist (anyone led before): its absence is a loss.
    expect_ledger: bool

    @classmethod
    def begin(
        cls, *, token: str, epoch: int, sent: float, timing: Timing, delay: bool, expect_ledger: bool
    ) -> Leadership:
        """A term whose acquisition was sent at ``sent``; ``delay``: wait out
        any previous leader's lease before the first fire."""
        return cls(
            token=token,
            epoch=epoch,
            renew_at=sent + timing.renew_interval,
            deadline=sent + timing.fire_deadline,
            fire_not_before=sent + timing.failover_delay if delay else 0.0,
            expect_ledger=expect_ledger,
        )

    def renewed(self, sent: float, timing: Timing) -> None:
        """A renewal sent at ``sent`` succeeded."""
        self.deadline = sent + timing.fire_deadline
        self.renew_at = sent + timing.renew_interval

    def retry_renewal(self, now: float) -> None:
        """After a fault: renew at the next turn (the deadline stays)."""
        self.renew_at = now

    def check(self, now: float, timing: Timing) -> None:
        """Raise :class:`Expired` once the firing deadline has passed."""
        if now >= self.deadline:
            raise Expired(f"no successful renewal for {int(timing.fire_deadline * 1000)} ms")
