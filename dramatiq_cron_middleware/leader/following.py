"""Following: wait for the lease, depose a stale one, take it when free.

A follower blocks on Redis until the lease is released or is due to
expire, then competes for it.  Expiry runs on the server's wall clock, so
the wait is also bounded by this process's monotonic clock: a lease nobody
renewed for longer than :attr:`~.timing.Timing.stale_after` by that clock
is deposed.  With fast takeover (opt-in), the wait is sliced, and between
slices the follower checks whether the leader's process is gone (its
presence connection closed) and deposes its lease at once.

Winning the lease begins a :class:`~.leadership.Leadership`, delayed by a
lease after a suspected Redis failover.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from ..stop_request import StopRequest
from ..store.abc import LeaseStore
from ..store.connection import redact
from ..store.lease import Acquired, Held
from ..store.server_identity import DataLoss, ServerIdentity, classify_loss
from ..store.timing import Timing
from .leadership import Leadership
from .owed import OwedQueue
from .reports import Reports

__all__ = ["REDIS_LATE_MS", "Follower", "fast_slice_ms"]

_FAULTS = (redis.ConnectionError, redis.TimeoutError, OSError)

#: How late Redis may end a blocking wait: its blocked clients time out in
#: the event loop, which at the default ``hz 10`` may sleep 100 ms.
REDIS_LATE_MS = 100


def fast_slice_ms(interval_ms: int) -> int:
    """The blocking wait between two fast-takeover checks, so that they are
    at most ``interval_ms`` apart although Redis may end the wait up to
    :data:`REDIS_LATE_MS` late (at least half the interval: a shorter
    interval than Redis's lateness costs more checks, not less delay)."""
    return max(interval_ms - REDIS_LATE_MS, (interval_ms + 1) // 2, 1)


class Follower:
    """Competes for the lease until this process leads.

    Parameters:
      lease: This candidate's lease handle.
      timing: Every duration (``fast_takeover_ms``: check every this many
        ms whether the leader's process is gone; None: wait for the lease).
      reports: The leader's reports (the logger, corrupt keys, one
        WARNING per data loss for a while).
      owed: Granted ticks still to enqueue (paid while following too).
      stopping: The thread's stop request (ends a wait).
      identify_server: Asks the server who it is (to tell a failover from
        an eviction).  None: every data loss counts as a suspected failover.
      monotonic: The clock of local waits.
    """

    def __init__(
        self,
        *,
        lease: LeaseStore,
        timing: Timing,
        reports: Reports,
        owed: OwedQueue,
        stopping: StopRequest,
        identify_server: Callable[[], ServerIdentity | None] | None = None,
        monotonic: Callable[[], float],
    ) -> None:
        self.lease = lease
        self.timing = timing
        self.logger = reports.logger
        self.owed = owed
        self.stopping = stopping
        self.report_corrupt = reports.corrupt
        self.losses = reports.losses
        #: None once fast takeover turned out not to work here (an ACL).
        self.fast_takeover_ms = timing.fast_takeover_ms
        self.monotonic = monotonic
        self._identify = identify_server
        #: Someone held the lease once, so an epoch exists: if it later
        #: vanishes, that is data loss, told apart from a failover.
        self._seen_epoch = False
        self._failover_suspected = False
        self._server: ServerIdentity | None = None
        #: The holder's ``(token, renewal count)`` and when we first saw it.
        self._stale: tuple[str, str, float] | None = None

    def suspect_failover(self) -> None:
        """A replica answered: delay the first fire of the next term."""
        self._failover_suspected = True

    def follow(self) -> Leadership | None:
        """Try once to take the lease: the new term if it was won, else None
        after waiting until it is worth trying again."""
        sent = self.monotonic()
        result = self.lease.acquire()
        self.report_corrupt(result.corrupt)
        if isinstance(result, Acquired):
            self._stale = None
            return self._begin(result, sent)
        if not self._seen_epoch:
            self._seen_epoch = True
            self._server = self._who_is_serving()
        # Ticks granted to this process while it led stay its own to enqueue.
        self.owed.pay()
        if self.stopping.is_set():
            return None
        wait = self._wait_ms(result)
        if wait is not None:
            retry = self.owed.next_try()
            if retry is not None:
                wait = max(1, min(wait, int((retry - self.monotonic()) * 1000) + 1))
            self._wait(wait)
        return None

    def _wait(self, wait_ms: int) -> None:
        if self.fast_takeover_ms is None:
            self.lease.wait_for_release(wait_ms)
            return
        # Fast takeover: wait in short slices, and between them check whether
        # the leader's process is gone (its presence connection closed).
        # Redis ends a blocking wait up to a server cron cycle late: a slice
        # that short of the interval keeps two checks within the interval.
        deadline = self.monotonic() + wait_ms / 1000
        while not self.stopping.is_set() and self.fast_takeover_ms is not None:
            left = int((deadline - self.monotonic()) * 1000)
            if left <= 0 or self.lease.wait_for_release(min(left, fast_slice_ms(self.fast_takeover_ms))):
                return
            if self._depose_if_gone():
                self.logger.info(
                    "The cron leader's connection to Redis is gone; taking over without waiting for its lease."
                )
                return

    def _wait_ms(self, held: Held) -> int | None:
        """How long to wait (ms) before competing again, bounded by the
        lease length on *this* process's monotonic clock: key expiry runs
        on the server's wall clock, which may have stepped back.  None
        when a lease nobody renewed for that long was just deposed."""
        now = self.monotonic()
        seen = (held.token, held.renewals)
        if self._stale is None or self._stale[:2] != seen:
            self._stale = (*seen, now)
        elif now - self._stale[2] >= self.timing.stale_after:
            if held.token and self.lease.depose(held.token, "seq", held.renewals):
                self.logger.warning(
                    "The cron lease was not renewed for %d ms by this process's clock (the Redis clock may "
                    "have stepped back); deposed it.",
                    int((now - self._stale[2]) * 1000),
                )
            self._stale = None
            return None
        remaining = held.remaining_ms
        ttl = self.timing.lease_ms
        wait = ttl if remaining < 0 else min(remaining + 5, ttl)
        if remaining == -2:  # vanished between the check and PTTL
            wait = 1
        left_by_our_clock = self.timing.stale_after - (now - self._stale[2])
        return max(1, min(wait, int(left_by_our_clock * 1000) + 5))

    def _depose_if_gone(self) -> bool:
        try:
            return self.lease.depose_if_gone()
        except redis.ResponseError as exc:  # NoPermissionError: the lease let go of its presence connection
            self.fast_takeover_ms = None
            self.logger.warning(
                "fast_takeover needs the CLIENT command (%s); falling back to lease-only takeover.",
                redact(str(exc)),
            )
            return False

    def _begin(self, acquired: Acquired, sent: float) -> Leadership | None:
        token = self.lease.token
        if token is None:  # released by a stop on another thread meanwhile
            return None
        # A ledger should exist if anyone led before: its absence is a loss.
        expect_ledger = acquired.epoch > 1 or (acquired.epoch_was_missing and self._seen_epoch)
        delay = self._failover_suspected
        if acquired.epoch_was_missing and self._seen_epoch:
            loss = classify_loss(self._server, self._who_is_serving())
            delay = delay or loss in (DataLoss.FAILOVER, DataLoss.UNKNOWN)
            if self.losses.first():
                self.logger.warning(
                    "The cron epoch counter was gone (%s): the scheduler's data in Redis was lost.", loss.value
                )
        elif not self._seen_epoch:
            self._server = self._who_is_serving()
        self._seen_epoch = True
        self._failover_suspected = False
        if delay:
            # A write acknowledged by the old master may be missing here; wait
            # until any previous leader's lease has certainly run out.
            self.logger.warning(
                "Acquired cron leadership (epoch %d) after a suspected Redis failover; first fire delayed by %d ms.",
                acquired.epoch,
                int(self.timing.failover_delay * 1000),
            )
        else:
            self.logger.info(
                "Acquired cron leadership (epoch %d) on %s pid %d.", acquired.epoch, self.lease.host, self.lease.pid
            )
        return Leadership.begin(
            token=token, epoch=acquired.epoch, sent=sent, timing=self.timing, delay=delay, expect_ledger=expect_ledger
        )

    def _who_is_serving(self) -> ServerIdentity | None:
        if self._identify is None:
            return None
        try:
            return self._identify()
        except (*_FAULTS, redis.RedisError):
            return None
