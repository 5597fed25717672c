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
from ..store.codes import Corrupt
from ..store.connection import ENV_URL, redact, refusal, scripting_missing
from ..store.durability import Unconfirmed
from ..store.ledger import NotLeader
from ..store.server_identity import ServerIdentity
from ..store.timing import Timing
from .candidates import ScheduleSets
from .firing import BATCH_LIMIT, Firing, LeaderObserver
from .following import Follower
from .leadership import Expired, Leadership, State
from .owed import OwedQueue
from .reports import Episode, Flapping, OnceReports, credentials_problem, report_corrupt
from .runtime_feed import RUNTIME_POLL
from .tick_queue import TickQueue

__all__ = ["BATCH_LIMIT", "RUNTIME_POLL", "LeaderObserver", "LeaderThread", "ReleaseReport"]

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


class LeaderThread(threading.Thread, Generic[H]):
    """Competes for the lease and, while leading, fires due ticks.

    Parameters:
      store: The lease, ledger, runtime reads, clock and keys.
      boundary: How granted ticks reach the broker (see boundary.py).
      schedules: Every schedule declared on the broker.
      timing: Every duration, derived from the lease length.
      logger: Where state changes are reported.
      observer: Told about leadership, renewals and decided ticks.
        Defaults to None, meaning nobody listens.
      fast_takeover_ms: Check every this many ms whether the leader's
        process is gone.  Defaults to None (wait for the lease).
      identify_server: Asks the server who it is (to tell a failover from
        an eviction).  Defaults to None: every data loss counts as a
        suspected failover.
      boot_check: Run once, at the first turn that reaches Redis (the
        eviction policy check).
      declared_actors: Whether an actor name is declared by this process's
        code (a runtime schedule of another actor fires too, with one
        WARNING).
      hand_over: Makes this thread's hand-over at shutdown (see
        shutdown.py).  Defaults to None: a signal only stops the thread,
        which then releases.
      pace: Whether a turn waits (for the next tick, a renewal or a
        retry).  Defaults to True; False when a fake clock drives
        :meth:`step` by hand (``testing.CronSimulator``).
      one_shot_retention_ms: How long a decided one-shot stays listed as
        done after its instant before the leader removes it.  Defaults to
        one day.
    """

    def __init__(
        self,
        *,
        store: Store,
        boundary: BrokerBoundary,
        schedules: Sequence[BoundSchedule],
        timing: Timing,
        logger: logging.Logger,
        observer: LeaderObserver | None = None,
        fast_takeover_ms: int | None = None,
        identify_server: Callable[[], ServerIdentity | None] | None = None,
        boot_check: Callable[[], object] | None = None,
        declared_actors: Callable[[str], bool] | None = None,
        hand_over: Callable[[LeaderThread[H]], H] | None = None,
        pace: bool = True,
        one_shot_retention_ms: int = 86_400_000,
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
        self._boot_check = boot_check
        self._release_lock = threading.Lock()
        self._released = False
        self._stopped = False
        self._fault: Episode[str] = Episode()
        #: Writes too few replicas acknowledged: reported apart from the
        #: faults above.  A turn that completes after one made a confirmed
        #: write (the renewal retried, the settle, or a follower's
        #: acquisition, which always writes), so it ends the episode.
        self._unconfirmed: Episode[str] = Episode()
        # Until a first turn completes, and for one lease after the start:
        # a fresh replica's initial sync (Redis waits repl-diskless-sync-delay,
        # 5 s by default, before sending it) is the expected cause of writes
        # not acknowledged yet, said at INFO; a WARNING only once it lasts.
        self._booting_until: float | None = store.clock.monotonic() + timing.lease_ms / 1000
        declared = {s.id: s for s in schedules}
        reports, losses = OnceReports(logger), Flapping()
        self.owed = OwedQueue(
            boundary=boundary,
            logger=logger,
            now_ms=store.clock.now_ms,
            monotonic=store.clock.monotonic,
            enqueued=self._report_enqueued,
            drop_stale=store.runtime.drop_stale if store.runtime is not None else None,
        )
        self.schedule_sets = ScheduleSets(
            declared, lease=store.lease, ledger=store.ledger, keys=store.keys, logger=logger
        )
        corrupt = self._reporter(reports)
        self.follower = Follower(
            lease=store.lease,
            timing=timing,
            logger=logger,
            owed=self.owed,
            stopping=self.stopping,
            report_corrupt=corrupt,
            losses=losses,
            identify_server=identify_server,
            fast_takeover_ms=fast_takeover_ms,
            monotonic=store.clock.monotonic,
        )
        self.firing = Firing(
            store=store,
            declared=declared,
            boundary=boundary,
            owed=self.owed,
            schedule_sets=self.schedule_sets,
            timing=timing,
            logger=logger,
            observer=self.observer,
            report_once=reports,
            report_corrupt=corrupt,
            losses=losses,
            stopping=self.stopping,
            declared_actor=declared_actors or (lambda name: True),
            one_shot_retention_ms=one_shot_retention_ms,
        )
        self._losses = losses
        #: The process the lease is this thread's in: a forked child
        #: inherits the object, never the lease.
        self._pid = os.getpid()
        #: What a signal handler or ``atexit`` calls (see shutdown.py).
        self.hand_over = hand_over(self) if hand_over is not None else None

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
            self._turn()
            if self.store.clock.observations != replies:  # Redis answered this turn
                self._healthy()
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

    def _healthy(self) -> None:
        self._booting_until = None
        unconfirmed = self._unconfirmed.recovered()
        if unconfirmed is not None:
            if unconfirmed == "boot":
                self.logger.info("The cron scheduler's first writes are confirmed durable: it fires from now.")
            else:
                self.logger.warning("The cron scheduler's writes are confirmed durable again.")
            self.observer.replicas_confirmed(confirmed=True)
            self.lease.report_replicas(None)
        fault = self._fault.recovered()
        if fault is not None:
            if fault == "unreachable":
                self.logger.warning("Cron scheduler reaches Redis again.")
            elif fault.startswith("refused:"):
                self.logger.warning("Redis accepts the cron scheduler's commands again.")
            elif fault.startswith("credentials:"):
                self.logger.warning("Redis accepts the cron scheduler's password again.")
            else:
                self.logger.warning("Cron leader loop works again.")

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
        if unconfirmed is not None:
            self._report_unconfirmed(unconfirmed)
        else:
            self._report_fault(exc, refused)
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

    def _report_unconfirmed(self, unconfirmed: Unconfirmed) -> None:
        try:
            self.lease.report_replicas(unconfirmed)  # refreshed at each retry, for operators
        except (*_FAULTS, redis.RedisError):
            pass  # a replica answered, or Redis went away: the WARNING below still says it
        booting = self._booting_until is not None and self.store.clock.monotonic() < self._booting_until
        if booting and self._unconfirmed.failing("boot"):
            self.logger.info(
                "Waiting for the cron scheduler's first writes to be confirmed durable (%s), as after a "
                "replica's initial sync: nothing fires until they are; a WARNING if it lasts past %d ms.",
                unconfirmed,
                self.timing.lease_ms,
            )
            self.observer.replicas_confirmed(confirmed=False)
        elif not booting and self._unconfirmed.failing("unconfirmed"):
            self.logger.warning(
                "The cron scheduler's writes are not confirmed durable (%s): nothing fires until they are (a "
                "claim made meanwhile is settled then); a leader steps down after %d ms; retrying every %d ms.",
                unconfirmed,
                int(self.timing.fire_deadline * 1000),
                int(self.timing.retry_interval * 1000),
            )
            self.observer.replicas_confirmed(confirmed=False)

    def _report_fault(self, exc: BaseException, refused: str | None) -> None:
        credentials = credentials_problem(exc) if refused == "" else None
        if refused is None:
            key = f"{type(exc).__name__}: {exc}"
        elif credentials is not None:
            key = f"credentials:{credentials}"
        else:
            key = f"refused:{refused.split(':')[0]}" if refused else "unreachable"
        no_scripting = scripting_missing(exc)
        if self._fault.failing(key):
            if credentials is not None:
                self.logger.warning(
                    "%s: nothing is scheduled by this process until Redis accepts it; retrying every %d ms "
                    "(fix redis= or %s and restart the workers).",
                    credentials,
                    int(self.timing.retry_interval * 1000),
                    ENV_URL,
                )
            elif refused is None and no_scripting is not None:
                # A setting of the server, not a bug: no traceback.
                self.logger.error(
                    "Redis cannot run the cron scheduler's Lua scripts (%s): the scheduler needs EVAL, EVALSHA and "
                    "SCRIPT (Redis 6.2 or later, or Valkey with its Lua scripting engine loaded; were they renamed "
                    "or disabled?); nothing fires from this process; retrying every %d ms.",
                    redact(no_scripting),
                    int(self.timing.retry_interval * 1000),
                )
            elif refused is None:
                self.logger.error("Cron leader loop failed: %s", redact(key), exc_info=True)
            elif refused:
                self.logger.warning(
                    "Redis refuses the cron scheduler's commands (%s): nothing fires meanwhile; retrying every %d ms.",
                    redact(refused),
                    int(self.timing.retry_interval * 1000),
                )
            else:
                self.logger.warning(
                    "Cron scheduler cannot reach Redis (%s); retrying every %d ms.",
                    redact(f"{type(exc).__name__}: {exc}"),
                    int(self.timing.retry_interval * 1000),
                )

    def _report_enqueued(self, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        self.observer.enqueued(schedule_id=schedule_id, tick_ms=tick_ms, lag_ms=lag_ms)

    def _reporter(self, reports: OnceReports) -> Callable[[Corrupt], None]:
        keys = self.store.keys
        return lambda corrupt: report_corrupt(reports, keys, corrupt)
