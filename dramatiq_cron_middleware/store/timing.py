"""Every duration the scheduler uses, derived once from the lease length.

One number, one home: the middleware builds a :class:`Timing` from
``lock_ttl`` and hands it to everyone who waits, renews or times out, so
the ratios below are written nowhere else.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

__all__ = ["Timing"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """The scheduler's durations, in seconds unless the name says ms.

    Build it with :meth:`for_lease`.
    """

    #: Socket timeout of the operators' calls (the CLI, the dashboard, the
    #: runtime API): they come from people and scripts, not lease traffic,
    #: so they do not scale with the lease.
    OPERATOR_TIMEOUT_MS: ClassVar[int] = 2000
    #: How long the shutdown hand-over may try to release the lease before
    #: it gives up (once, with a WARNING), whatever the lease: a worker must
    #: exit well within a container's grace (``docker stop`` waits 10 s)
    #: even when Redis does not answer.  Each attempt times out after
    #: ``HAND_OVER_ATTEMPT_MS``; a second one starts only within the bound.
    HAND_OVER_MS: ClassVar[int] = 1000
    HAND_OVER_ATTEMPT_MS: ClassVar[int] = 500

    #: The lease length.
    lease_ms: int
    #: How often the leader renews: two fifths of the lease, but never so
    #: late that an attempt and its retry (two op timeouts) no longer fit
    #: before the firing deadline, nor more often than every third (as etcd
    #: does).  At the default lease, 6 s: an idle leader's renewals, its
    #: only commands, cost 1/6 round trip per second.
    renew_interval: float
    #: How long after the last successful renewal was *sent* the leader
    #: stops firing: two thirds of the lease (Kubernetes' renew deadline),
    #: leaving a third as margin for clock-rate error and slow replies.
    fire_deadline: float
    #: How often every process retries while Redis is unreachable.
    retry_interval: float
    #: Socket timeout of the scheduler's commands.
    op_timeout_ms: int
    #: Extra socket time the follower's blocking wait is allowed.
    block_timeout_ms: int
    #: How long a new leader waits before its first fire after a suspected
    #: failover: one lease, so any previous leader's lease has run out.
    failover_delay: float
    #: How long a follower waits, on its own monotonic clock, for a lease
    #: nobody renews before deposing it: the lease plus a renewal's worth of
    #: slack.  Key expiry follows the server's wall clock, which may step.
    stale_after: float
    #: How recently a candidate must have touched the candidates set to
    #: count as live (a renewal's count, the wake-ups at release): two
    #: leases, as followers refresh their entry about once per lease.
    candidate_live_ms: int
    #: How far back operators' views list candidates: three leases keep a
    #: live follower listed and drop the ones that stopped.
    candidate_listed_ms: int
    #: When an acquisition forgets a candidate that stopped touching the set.
    candidate_forgotten_ms: int
    #: How long a durable write waits for replicas to acknowledge it
    #: (``WAIT``): half the op timeout, so the reply still arrives in time.
    replica_wait_ms: int = 0
    #: Fast takeover (opt-in): how often a follower checks whether the
    #: leader's process is gone; None waits for the lease.
    fast_takeover_ms: int | None = None
    #: How long a decided one-shot stays listed as done after its instant
    #: before the leader removes it.
    one_shot_retention_ms: int = 86_400_000

    @classmethod
    def for_lease(
        cls, lease_ms: int, *, fast_takeover_ms: int | None = None, one_shot_retention_ms: int = 86_400_000
    ) -> Timing:
        """The durations for a lease of ``lease_ms`` milliseconds (and the
        two given as they are)."""
        lease = lease_ms / 1000
        op_timeout_ms = max(100, min(lease_ms // 6, 2000))
        return cls(
            lease_ms=lease_ms,
            renew_interval=max(lease / 3, min(2 * lease / 5, 2 * lease / 3 - 2 * op_timeout_ms / 1000)),
            fire_deadline=2 * lease / 3,
            retry_interval=min(1.0, lease / 6),
            op_timeout_ms=op_timeout_ms,
            block_timeout_ms=lease_ms,
            failover_delay=lease,
            stale_after=lease + op_timeout_ms / 1000,
            candidate_live_ms=2 * lease_ms,
            candidate_listed_ms=3 * lease_ms,
            candidate_forgotten_ms=10 * lease_ms,
            replica_wait_ms=op_timeout_ms // 2,
            fast_takeover_ms=fast_takeover_ms,
            one_shot_retention_ms=one_shot_retention_ms,
        )
