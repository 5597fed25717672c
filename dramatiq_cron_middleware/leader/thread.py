"""The leader loop: one background thread per worker process.

A loop over an explicit :class:`~.leadership.State`::

    FOLLOWING --acquired--> LEADING --refused / firing deadline--> FOLLOWING
        |                      |
        +------ stop request --+--> STOPPING --released--> STOPPED

Following (:class:`~.following.Follower`) waits on Redis for the lease
and takes it; leading (:class:`~.firing.Firing`) fires what is due under
a :class:`~.leadership.Leadership`, a value that exists only while this
process leads.  Faults are logged once per state change, never once per
retry.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import redis

from ..schedules.schedule import BoundSchedule
from ..stop_request import StopRequest
from ..store.abc import LeaseStore, Store
from ..store.boundary import BrokerBoundary
from ..store.connection import redact, refusal
from ..store.durability import Unconfirmed
from ..store.ledger import NotLeader
from ..store.server_identity import ServerIdentity
from ..store.timing import Timing
from .declared import Declared
from .faults import Faults
from .firing import BATCH_LIMIT, Firing, LeaderObserver
from .following import Follower
from .leadership import Expired, Leadership, State
from .owed import OwedQueue
from .reports import Reports
from .runtime_feed import RUNTIME_POLL
from .tick_queue import TickQueue

__all__ = ["BATCH_LIMIT", "RUNTIME_POLL", "Declared", "LeaderObserver", "LeaderThread", "ReleaseReport", "ServerChecks"]

_FAULTS = (redis.ConnectionError, redis.TimeoutError, OSError)


class ReleaseReport(Protocol):
    """What the leader asks of a shutdown hand-over (see shutdown.py)."""

    @property
    def failed(self) -> bool:
        """Whether the hand-over's release gave up (Redis did not answer
        within its bound, or refused)."""

    def run(self) -> None:
        """Begin the hand-over and send the release, unless it began."""

    def wait(self, timeout: float) -> bool:
        """Wait (bounded) for a release under way to be answered or given
        up; False if it is still under way."""

    def claim_report(self, *, wait: float) -> bool:
        """True, once, when the hand-over released the lease."""

    def report_failure(self) -> bool:
        """Log, once, that the release gave up; True if this call did."""


H = TypeVar("H", bound=ReleaseReport)


@dataclasses.dataclass(frozen=True)
class ServerChecks:
    """What the leader asks of the Redis server beyond the store."""

    #: Asks the server who it is, to tell a failover from an eviction
    #: (None: every data loss counts as a suspected failover).
    identify: Callable[[], ServerIdentity | None] | None = None
    #: Run once, at the first turn that reaches Redis (the eviction
    #: policy check, the replicas a write needs).
    at_boot: Callable[[], object] | None = None


class LeaderThread(threading.Thread, Generic[H]):
    """Competes for the lease and, while leading, fires due ticks.

    Parameters:
      store: The lease, ledger, runtime reads, clock and keys.
      boundary: How granted ticks reach the broker (see boundary.py).
      declared: The schedules declared on the broker, and the actors this
        process's code declares (a runtime schedule of another actor fires
        too, with one WARNING).  A sequence of schedules: every actor
        counts as declared.
      timing: Every duration, derived from the lease length (the fast
        takeover's interval and a decided one-shot's retention too).
      logger: Where state changes are reported.
      observer: Told about leadership, renewals and decided ticks.
        Defaults to None, meaning nobody listens.
      server: What the leader asks of the Redis server beyond the store.
        Defaults to None: no boot check, and every data loss counts as a
        suspected failover.
      pace: Whether a turn waits (for the next tick, a renewal or a
        retry).  Defaults to True; False when a fake clock drives
        :meth:`step` by hand (``testing.CronSimulator``).

    Its shutdown hand-over (see shutdown.py), when it has one, is set as
    :attr:`hand_over` before it starts; without one a signal only stops
    the thread, which then releases.
    """

    def __init__(
        self,
        *,
        store: Store,
        boundary: BrokerBoundary,
        declared: Declared | Sequence[BoundSchedule],
        timing: Timing,
        logger: logging.Logger,
        observer: LeaderObserver | None = None,
        server: ServerChecks | None = None,
        pace: bool = True,
    ) -> None:
        super().__init__(name="dramatiq-cron-leader", daemon=True)
        self.store = store
        self.timing = timing
        self.logger = logger
        self.observer = observer or LeaderObserver()
        self.stopping = StopRequest(clock=store.clock.monotonic)
        self.pace = pace
        #: The current term; None while following.
        self.leadership: Leadership | None = None
        server = server or ServerChecks()
        self._boot_check = server.at_boot
        self._release_lock = threading.Lock()
        self._released = False
        self._stopped = False
        self._granted = 0  # Firing.granted when the turn began
        self.faults = Faults(
            lease=store.lease, timing=timing, logger=logger, observer=self.observer, monotonic=store.clock.monotonic
        )
        if not isinstance(declared, Declared):
            declared = Declared.of(declared)
        reports = Reports.to(logger, store.keys)
        self.owed = OwedQueue(
            boundary=boundary,
            logger=logger,
            now_ms=store.clock.now_ms,
            monotonic=store.clock.monotonic,
            enqueued=self._report_enqueued,
            drop_stale=store.runtime.drop_stale if store.runtime is not None else None,
        )
        self.follower = Follower(
            lease=store.lease,
            timing=timing,
            reports=reports,
            owed=self.owed,
            stopping=self.stopping,
            identify_server=server.identify,
            monotonic=store.clock.monotonic,
        )
        self.firing = Firing(
            store=store,
            declared=declared,
            boundary=boundary,
            owed=self.owed,
            timing=timing,
            reports=reports,
            observer=self.observer,
            stopping=self.stopping,
        )
        self.schedule_sets = self.firing.schedule_sets
        self._losses = reports.losses
        #: The process the lease is this thread's in: a forked child
        #: inherits the object, never the lease.
        self._pid = os.getpid()
        #: What a signal handler or ``atexit`` calls (see shutdown.py).
        self.hand_over: H | None = None

    # -- what others read -----------------------------------------------------

    @property
    def state(self) -> State:
        """Where the loop stands."""
        if self._stopped:
            return State.STOPPED
        if self.stopping.is_set():
            return State.STOPPING
        return State.FOLLOWING if self.leadership is None else State.LEADING

    @property
    def leading(self) -> bool:
        """Whether this process currently leads (as far as it knows)."""
        return self.leadership is not None

    @property
    def epoch(self) -> int | None:
        """The epoch this process leads under; None while following."""
        leadership = self.leadership
        return None if leadership is None else leadership.epoch

    @property
    def lease(self) -> LeaseStore:
        """This candidate's lease handle."""
        return self.store.lease

    @property
    def queue(self) -> TickQueue:
        """What fires next."""
        return self.firing.queue

    @property
    def boundary(self) -> BrokerBoundary:
        """How granted ticks reach the broker."""
        return self.firing.boundary

    # -- life cycle -----------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the loop to stop.  Safe to call from a signal handler: it
        sets a flag and writes a byte to a socket, taking no lock.  A local
        wait ends at once; a wait on Redis (following, or an idle leader's)
        ends when this candidate's wake-up list is pushed (:meth:`stop`
        and the shutdown hand-over do) or at its timeout."""
        self.stopping.set()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the loop and release the lease if held (compare-and-delete).
        With a hand-over, the release and the push that ends a blocking
        wait go out at once on its connection, bounded by
        ``Timing.HAND_OVER_MS`` whatever the lease; once it gave up (Redis
        does not answer), nothing here waits for Redis again."""
        self.stopping.set()
        hand_over = self.hand_over
        if hand_over is not None:
            hand_over.run()
        elif self.is_alive():
            try:
                self.lease.wake_self()  # ends a blocking wait on Redis
            except _FAULTS:
                pass
        if self.is_alive() and threading.current_thread() is not self:
            # A thread stuck on a Redis that did not answer the hand-over
            # will not be done within the timeout either.
            self.join(min(timeout, 0.1) if hand_over is not None and hand_over.failed else timeout)
        self._release()

    def run(self) -> None:
        while self.state in (State.FOLLOWING, State.LEADING):
            self.step()
        self._stop_now()

    def step(self) -> None:
        """One turn of the loop, its faults handled (the thread's body; a
        test or simulator on a fake clock turns it by hand)."""
        try:
            replies = self.store.clock.observations
            self._granted = self.firing.granted
            self._turn()
            if self.store.clock.observations != replies:  # Redis answered this turn
                self.faults.healthy()
        except Unconfirmed as exc:
            self._faulty(exc, unconfirmed=exc)
        except NotLeader:
            self._step_down("Redis holds another leader's token")
        except Expired as exc:
            self._step_down(str(exc))
        except redis.ReadOnlyError as exc:
            # A replica answered: a failover is under way or just happened.
            self.follower.suspect_failover()
            self._faulty(exc)
        except _FAULTS as exc:
            self._faulty(exc)
        except Exception as exc:  # a refusal (an expected fault), a bug or an unforeseen reply
            self._faulty(exc, refused=refusal(exc))

    def _turn(self) -> None:
        """One pass of the state machine."""
        if self._boot_check is not None:
            self._boot_check()
            self._boot_check = None
        if not self.schedule_sets.registered:
            self.schedule_sets.register()
        self.firing.settle()  # a claim whose reply was lost, even after a step-down
        leadership = self.leadership
        if leadership is not None:
            self.firing.lead(leadership, sleep=self.pace)
            return
        leadership = self.follower.follow()
        if leadership is not None:
            self._released = False
            self.firing.forget()  # read every last tick and runtime schedule again
            self.leadership = leadership
            self.observer.leadership_changed(epoch=leadership.epoch, leading=True)

    def _stop_now(self) -> None:
        # Give the lease up right away so a follower takes over in
        # milliseconds, while the worker may still be draining messages.
        self._release()
        # Last chance for granted ticks whose enqueue failed.
        self.owed.pay_quietly()
        # This thread object may live on in a reference cycle until the
        # collector runs (paused while another leader loads): let go of the
        # runtime schedules now.
        self.firing.forget()
        self.stopping.close()
        self._stopped = True

    def _release(self) -> None:
        if os.getpid() != self._pid:  # a forked child: the lease is its parent's
            return
        # stop() on another thread may release while this thread does.
        if not self._release_lock.acquire(timeout=1.0):
            return
        try:
            if self._released:
                return
            hand_over = self.hand_over
            if hand_over is not None and not hand_over.wait(2 * Timing.HAND_OVER_MS / 1000):
                # Still sent on another thread past its bound (a signal
                # handler starved of CPU): releasing again here would wait
                # for a Redis that may not answer, holding this lock; the
                # stop path, after that thread, says how it went.
                return
            leadership, self.leadership = self.leadership, None
            epoch = None if leadership is None else leadership.epoch
            if epoch is not None:
                self.observer.leadership_changed(epoch=epoch, leading=False)
            if hand_over is not None:
                if hand_over.failed:
                    # Redis did not answer the hand-over within its bound:
                    # asking again on the pooled client would only hold the
                    # exit up for two op timeouts more.
                    self.lease.forget()
                    self._released = True
                    if not hand_over.report_failure() and leadership is not None:
                        if self._lapsed_before_stop(leadership):
                            self._report_lapse(leadership)
                    return
            try:
                released = self.lease.release()
            except (*_FAULTS, redis.RedisError) as exc:
                if epoch is not None:
                    self.logger.warning(
                        "Could not release the cron lease (epoch %s): %s; it expires within %d ms.",
                        epoch,
                        redact(str(exc)),
                        self.timing.lease_ms,
                    )
                return
            self._released = True
            # A signal's hand-over may have released it first (or be at it).
            if epoch is not None and (released or self._handed_over()):
                self.logger.info("Released cron leadership (epoch %s).", epoch)
            elif leadership is not None and self._lapsed_before_stop(leadership):
                self._report_lapse(leadership)
        finally:
            self._release_lock.release()

    def _handed_over(self) -> bool:
        return self.hand_over is not None and self.hand_over.claim_report(wait=0.2)

    def _lapsed_before_stop(self, leadership: Leadership) -> bool:
        """Whether the stop came after the firing deadline: no renewal for
        that long (the process got no CPU, or was paused), so the lease
        may have expired before the hand-over could release it."""
        asked = self.stopping.at
        return asked is not None and asked >= leadership.deadline

    def _report_lapse(self, leadership: Leadership) -> None:
        asked = self.stopping.at
        assert asked is not None
        renewed = leadership.deadline - self.timing.fire_deadline
        self.logger.warning(
            "Lost cron leadership (epoch %s) before the shutdown hand-over: told to stop %d ms after the last "
            "successful renewal (the process got no CPU or was paused), so the lease was not released: "
            "followers take over when it expires (%d ms after that renewal).",
            leadership.epoch,
            int((asked - renewed) * 1000),
            self.timing.lease_ms,
        )

    # -- faults and reports ---------------------------------------------------

    def _step_down(self, reason: str) -> None:
        leadership, self.leadership = self.leadership, None
        if leadership is not None:
            if self.stopping.is_set() and self._lapsed_before_stop(leadership):
                self._report_lapse(leadership)
            elif self.stopping.is_set():  # the shutdown hand-over released it
                self.logger.debug("Cron leadership (epoch %s) ends: stopping.", leadership.epoch)
            elif self._losses.first_loss_of_lead():
                self.logger.warning(
                    "Lost cron leadership (epoch %s): %s; no further ticks fired by this process.",
                    leadership.epoch,
                    reason,
                )
            else:
                self.logger.info("Lost cron leadership (epoch %s): %s.", leadership.epoch, reason)
            self.observer.leadership_changed(epoch=leadership.epoch, leading=False)
        self.lease.forget()
        self.firing.forget()

    def _faulty(self, exc: BaseException, *, refused: str | None = "", unconfirmed: Unconfirmed | None = None) -> None:
        """Report a fault once per state change and wait before the next
        turn.  ``refused``: "" for an unreachable Redis, the refusal for a
        reachable one that refuses (one WARNING per kind, whichever command
        met it), None for anything else (a bug: ERROR with traceback).
        ``unconfirmed``: Redis answered, but too few replicas acknowledged."""
        if self.stopping.is_set():
            # Met on the way out (a Redis that froze, a connection the stop
            # closed): the release reports how the stop went, in one line.
            return
        if refused is not None and self.firing.granted != self._granted:
            # Redis granted a claim this turn before the fault: the fault
            # before it ended there (the next one is a new episode).
            self.faults.healthy()
        if unconfirmed is not None:
            self.faults.unconfirmed(unconfirmed)
        else:
            self.faults.fault(exc, refused)
        leadership = self.leadership
        if leadership is not None:
            try:
                leadership.check(self.store.clock.monotonic(), self.timing)
                # Retry the renewal soon, but keep firing nothing past the deadline.
                leadership.retry_renewal(self.store.clock.monotonic())
            except Expired as expired:
                self._step_down(str(expired))
        self.queue.invalidate()
        self.owed.pay_quietly()
        if self.pace:
            self.stopping.wait(self.timing.retry_interval)

    def _report_enqueued(self, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        self.observer.enqueued(schedule_id=schedule_id, tick_ms=tick_ms, lag_ms=lag_ms)
