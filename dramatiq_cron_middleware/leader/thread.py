"""The leader loop: one background thread per worker process.

While following, the thread blocks on Redis until the lease is released or
is due to expire, then competes for it.  While leading, it sleeps until the
next tick or renewal (blocked on Redis, where runtime schedule changes and
a stop push, when the sleep is long), claims what is due in bounded,
fenced batches, and enqueues what Redis granted.  It stops firing at its
own monotonic deadline when renewals fail, and steps down the moment Redis
refuses its token.
Faults are logged once per state change, never once per retry.

The thread is a state machine over small parts, each tested alone:
:class:`~.tick_queue.TickQueue` (what is due), :mod:`~.planner` (what to do
with it), :class:`~.owed.OwedQueue` (enqueues to retry),
:class:`~.clock.ServerClock` (what time it is) and
:class:`~.timing.Timing` (every duration).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ..schedules.planner import jitter_ms
from ..schedules.schedule import BoundSchedule
from ..shutdown import HandOver
from ..stop_request import StopRequest
from ..store.boundary import Boundary, BrokerBoundary, Payload
from ..store.clock import ClockStep, ServerClock
from ..store.codes import ClaimResult, Corrupt, Outcome, SyncCode
from ..store.collector import collector_paused
from ..store.connection import redact, refusal
from ..store.lease import Acquired, Held, Lease
from ..store.ledger import BadRequest, Ledger, NotLeader, SyncEntry
from ..store.runtime import RuntimeSchedules
from ..store.server_identity import DataLoss, ServerIdentity, classify_loss
from ..store.timing import Timing
from .candidates import ScheduleSets
from .owed import Owed, OwedQueue, names_of
from .reports import OnceReports
from .runtime_feed import RUNTIME_POLL, RuntimeFeed
from .tick_queue import Planned, TickQueue

__all__ = ["BATCH_LIMIT", "RUNTIME_POLL", "LeaderObserver", "LeaderThread"]

#: Claims per batch: about 10 ms of script time, so no script blocks Redis
#: (and the broker's consumers on it) for long, and renewal and the firing
#: deadline are honoured between batches.
BATCH_LIMIT = 1000


#: How long before a tick the leader wakes, to wait out the rest in short
#: naps: thread wake-ups come up to a millisecond late.
WAKE_EARLY = 0.002

#: An idle leader waits on Redis for runtime schedule changes (a blocking
#: pop) until this long before it must wake, and the rest locally: Redis
#: ends a blocking wait up to a server cron cycle late.
BLOCK_MARGIN = 0.15

_FAULTS = (redis.ConnectionError, redis.TimeoutError, OSError)

_KEY_NAMES = {
    Corrupt.LEASE: "lease",
    Corrupt.EPOCH: "epoch",
    Corrupt.CANDIDATES: "candidates",
    Corrupt.TICKS: "ticks",
    Corrupt.HISTORY: "history",
    Corrupt.PAUSED: "paused",
    Corrupt.BATCH: "batch",
    Corrupt.RUNTIME_REVS: "runtime_revs",
}


class LeaderObserver:
    """What the leader thread reports as it goes (metrics listen here).

    This base class ignores everything.  The methods are called on the
    leader thread itself, so they must be quick and must not raise.
    """

    def leadership_changed(self, *, epoch: int, leading: bool) -> None:
        """This process gained (``leading``) or lost leadership of ``epoch``."""

    def renewed(self, *, latency_ms: float) -> None:
        """A lease renewal succeeded after ``latency_ms``."""

    def tick_decided(self, *, schedule_id: str, outcome: str) -> None:
        """Redis recorded a tick of ``schedule_id`` with ``outcome``."""

    def enqueued(self, *, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        """A granted tick was enqueued ``lag_ms`` after it fell due."""


@dataclasses.dataclass
class _Unsettled:
    """A claim sent to Redis whose reply was not read."""

    batch_id: str
    epoch: int
    batch: list[Planned]
    payloads: list[Payload | None] | None


class LeaderThread(threading.Thread):
    """Competes for the lease and, while leading, fires due ticks.

    Parameters:
      boundary: How granted ticks reach the broker (see enqueue.py).
      schedules: Every schedule declared on the broker.
      lease, ledger: The Redis-side collaborators.
      clock: The server clock the lease and ledger refresh.
      timing: Every duration, derived from the lease length.
      prefix: The key prefix (part of every deterministic message id).
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
      runtime: The runtime schedule store, read in full on every
        acquisition and, while leading, for changes whenever a write
        notifies it (see runtime_feed.py).  Defaults to None: declared
        schedules only.
      declared_actors: Whether an actor name is declared by this process's
        code (a runtime schedule of another actor fires too, with one
        WARNING).
      shutdown_connection: A redis-py connection outside any pool, for the
        release at shutdown (see shutdown.py).  Defaults to None: a signal
        only stops the thread, which then releases.
    """

    def __init__(
        self,
        *,
        boundary: BrokerBoundary,
        schedules: Sequence[BoundSchedule],
        lease: Lease,
        ledger: Ledger,
        clock: ServerClock,
        timing: Timing,
        prefix: str,
        logger: logging.Logger,
        observer: LeaderObserver | None = None,
        fast_takeover_ms: int | None = None,
        identify_server: Callable[[], ServerIdentity | None] | None = None,
        boot_check: Callable[[], object] | None = None,
        runtime: RuntimeSchedules | None = None,
        declared_actors: Callable[[str], bool] | None = None,
        shutdown_connection: Any = None,
    ) -> None:
        super().__init__(name="dramatiq-cron-leader", daemon=True)
        self.observer = observer or LeaderObserver()
        self.fast_takeover_ms = fast_takeover_ms
        self.lease = lease
        self.ledger = ledger
        self.clock = clock
        self.timing = timing
        self.logger = logger
        self.monotonic = clock.monotonic
        self.queue = TickQueue(
            {s.id: s for s in schedules},
            prefix=prefix,
            now_ms=clock.now_ms,
            encode=self._encode_ahead if boundary.mode == Boundary.IN_CLAIM else None,
        )
        self.boundary = boundary
        self.owed = OwedQueue(
            boundary=boundary,
            logger=logger,
            now_ms=clock.now_ms,
            monotonic=clock.monotonic,
            enqueued=self._report_enqueued,
            drop_stale=runtime.drop_stale if runtime is not None else None,
        )
        self._declared = {s.id: s for s in schedules}
        self._report_once = OnceReports(logger)
        self.feed = (
            RuntimeFeed(
                runtime,
                queue=self.queue,
                ledger=ledger,
                declared=self._declared,
                declared_actor=declared_actors or (lambda name: True),
                clock=clock,
                report_once=self._report_once,
            )
            if runtime is not None
            else None
        )
        self._identify = identify_server
        self._boot_check = boot_check
        self.stopping = StopRequest()
        #: What a signal handler or ``atexit`` calls (see shutdown.py).
        self.hand_over = HandOver(leader=self, connection=shutdown_connection)
        self.epoch: int | None = None
        self._renew_at = 0.0
        self._deadline = 0.0
        self._fire_not_before = 0.0
        self._seen_epoch = False
        self._failover_suspected = False
        self._server: ServerIdentity | None = None
        self._unsettled: _Unsettled | None = None
        self._release_lock = threading.Lock()
        self._released = False
        self._fault: str | None = None
        self._stale: tuple[str, str, float] | None = None
        self._losses = _Flapping()
        self._expect_ledger = False
        self.schedule_sets = ScheduleSets(self._declared, lease=lease, ledger=ledger, logger=logger)
        clock.on_step = self._clock_stepped

    # -- life cycle -----------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this process currently leads (as far as it knows)."""
        return self.epoch is not None

    def request_stop(self) -> None:
        """Ask the loop to stop.  Safe to call from a signal handler: it
        sets a flag and writes a byte to a socket, taking no lock.  A local
        wait ends at once; a wait on Redis (following, or an idle leader's)
        ends when this candidate's wake-up list is pushed (:meth:`stop`
        and the shutdown hand-over do) or at its timeout."""
        self.stopping.set()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the loop and release the lease if held (compare-and-delete)."""
        self.stopping.set()
        if self.is_alive():
            try:
                self.lease.wake_self()  # ends a blocking wait on Redis
            except _FAULTS:
                pass
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
        self._release()

    def _release(self) -> None:
        # stop() on another thread may release while this thread does.
        if not self._release_lock.acquire(timeout=1.0):
            return
        try:
            if self._released:
                return
            epoch, self.epoch = self.epoch, None
            if epoch is not None:
                self.observer.leadership_changed(epoch=epoch, leading=False)
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
            if epoch is not None and (released or self.hand_over.claim_report(wait=0.2)):
                self.logger.info("Released cron leadership (epoch %s).", epoch)
        finally:
            self._release_lock.release()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                replies = self.clock.observations
                self._turn()
                if self.clock.observations != replies:  # Redis answered this turn
                    self._healthy()
            except NotLeader:
                self._step_down("Redis holds another leader's token")
            except redis.ReadOnlyError as exc:
                # A replica answered: a failover is under way or just happened.
                self._failover_suspected = True
                self._faulty(exc)
            except _FAULTS as exc:
                self._faulty(exc)
            except Exception as exc:  # a refusal (an expected fault), a bug or an unforeseen reply
                self._faulty(exc, refused=refusal(exc))
        # Stopped: give the lease up right away so a follower takes over in
        # milliseconds, while the worker may still be draining messages.
        self._release()
        # Last chance for granted ticks whose enqueue failed.
        self.owed.pay_quietly()
        if self.feed is not None:
            # This thread object may live on in a reference cycle until the
            # collector runs (paused while another leader loads): let go of
            # the runtime schedules now.
            self.feed.forget()
        self.stopping.close()

    def _turn(self) -> None:
        """One pass of the state machine."""
        if self._boot_check is not None:
            self._boot_check()
            self._boot_check = None
        if not self.schedule_sets.registered:
            self.schedule_sets.register()
        if self._unsettled is not None:
            self._settle()
        if self.leading:
            self._lead()
        else:
            self._follow()

    # -- following ------------------------------------------------------------

    def _follow(self) -> None:
        sent = self.monotonic()
        result = self.lease.acquire()
        self._report_corrupt(result.corrupt)
        if isinstance(result, Acquired):
            self._stale = None
            self._become_leader(result, sent)
            return
        # Someone holds the lease, so an epoch exists: if it later vanishes,
        # that is data loss, and worth telling apart from a failover.
        if not self._seen_epoch:
            self._seen_epoch = True
            self._server = self._who_is_serving()
        # Ticks granted to this process while it led stay its own to enqueue.
        self.owed.pay()
        if self.stopping.is_set():
            return
        wait = self._follow_wait(result)
        if wait is None:
            return
        retry = self.owed.next_try()
        if retry is not None:
            wait = max(1, min(wait, int((retry - self.monotonic()) * 1000) + 1))
        if self.fast_takeover_ms is None:
            self.lease.wait_for_release(wait)
            return
        # Fast takeover: wait in short slices, and between them check whether
        # the leader's process is gone (its presence connection closed).
        deadline = self.monotonic() + wait / 1000
        while not self.stopping.is_set() and self.fast_takeover_ms is not None:
            left = int((deadline - self.monotonic()) * 1000)
            if left <= 0 or self.lease.wait_for_release(min(left, self.fast_takeover_ms)):
                return
            if self._depose_if_gone():
                self.logger.info(
                    "The cron leader's connection to Redis is gone; taking over without waiting for its lease."
                )
                return

    def _follow_wait(self, held: Held) -> int | None:
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
        except redis.ResponseError as exc:  # NoPermissionError: an ACL without CLIENT
            self.fast_takeover_ms = None
            self.lease.presence_client = None
            self.logger.warning(
                "fast_takeover needs the CLIENT command (%s); falling back to lease-only takeover.",
                redact(str(exc)),
            )
            return False

    def _become_leader(self, acquired: Acquired, sent: float) -> None:
        self.epoch = acquired.epoch
        self._released = False
        # A ledger should exist if anyone led before: its absence is a loss.
        self._expect_ledger = acquired.epoch > 1 or (acquired.epoch_was_missing and self._seen_epoch)
        self._deadline = sent + self.timing.fire_deadline
        self._renew_at = sent + self.timing.renew_interval
        self.queue.invalidate()
        if self.feed is not None:
            self.feed.forget()  # read every runtime schedule again
        delay = self._failover_suspected
        if acquired.epoch_was_missing and self._seen_epoch:
            loss = classify_loss(self._server, self._who_is_serving())
            delay = delay or loss in (DataLoss.FAILOVER, DataLoss.UNKNOWN)
            if self._losses.first():
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
            self._fire_not_before = sent + self.timing.failover_delay
            self.logger.warning(
                "Acquired cron leadership (epoch %d) after a suspected Redis failover; first fire delayed by %d ms.",
                acquired.epoch,
                int(self.timing.failover_delay * 1000),
            )
        else:
            self._fire_not_before = 0.0
            self.logger.info(
                "Acquired cron leadership (epoch %d) on %s pid %d.", acquired.epoch, self.lease.host, self.lease.pid
            )
        self.observer.leadership_changed(epoch=acquired.epoch, leading=True)

    def _who_is_serving(self) -> ServerIdentity | None:
        if self._identify is None:
            return None
        try:
            return self._identify()
        except (*_FAULTS, redis.RedisError):
            return None

    # -- leading --------------------------------------------------------------

    def _lead(self) -> None:
        if not self._within_deadline():
            return
        token, epoch = self.lease.token, self.epoch
        if token is None or epoch is None:  # released by stop() on another thread
            return
        reload = self.feed is not None and self.feed.stale
        if reload or not self.queue.in_sync:
            with collector_paused():  # a takeover of 100,000 schedules allocates a million objects
                if self.feed is not None and reload:
                    self.feed.reload()  # all of them, before the sync
                self._sync(token, epoch)
        # Ticks first: a turn wakes at a tick, and the renewal and the
        # version read (due at turns too) would only delay it.  The firing
        # deadline, checked above and between batches, keeps this safe.
        if self.monotonic() >= self._fire_not_before:
            self._fire_due(token, epoch)
        self._renew_if_due()
        if self.feed is not None:
            self.feed.follow(token, epoch)
        self.owed.pay()
        self._sleep()

    def _renew_if_due(self) -> None:
        now = self.monotonic()
        if now < self._renew_at:
            return
        renewed = self.lease.renew()
        if renewed is None:
            raise NotLeader()
        self.observer.renewed(latency_ms=(self.monotonic() - now) * 1000)
        self._deadline = now + self.timing.fire_deadline
        self._renew_at = now + self.timing.renew_interval
        self.schedule_sets.check(renewed.live)

    def _within_deadline(self) -> bool:
        if self.monotonic() < self._deadline:
            return True
        self._step_down(f"no successful renewal for {int(self.timing.fire_deadline * 1000)} ms")
        return False

    def _sync(self, token: str, epoch: int) -> None:
        # Baselines are the server's now, unless its clock jumped ahead and
        # we ignore that: then our own estimate, so nothing is set in the
        # future.
        self.queue.begin_load()
        reply = self.ledger.sync(
            token,
            epoch,
            [SyncEntry.of(s) for s in self.queue.schedules.values()],
            now_ms=self.clock.now_ms() if self.clock.ignoring_step else None,
            expect_ledger=self._expect_ledger,
            on_chunk=self.queue.load_part,  # next ticks computed while Redis reads the next chunks
        )
        self._report_corrupt(reply.corrupt)
        if reply.ledger_lost and self._losses.first():
            self.logger.warning(
                "The cron ledger was gone (evicted, flushed or a restart without data): every schedule "
                "restarts from now; recorded in the history."
            )
        reshaped = [sid for sid, code in reply.codes.items() if code == SyncCode.RESHAPED]
        if reshaped:
            self.logger.info(
                "Cron schedules changed under the same identity start from now (no catch-up of the new "
                "shape's ticks): %s.",
                names_of(reshaped),
            )
        for sid, code in reply.codes.items():
            if code == SyncCode.CORRUPT:
                self._report_once(
                    f"corrupt:{sid}",
                    "the ledger entry of %s in %s is unparsable; replaced by a baseline at now",
                    sid,
                    self.lease.keys.ticks,
                )
            elif code == SyncCode.FUTURE:
                self._report_once(
                    f"future:{sid}",
                    "the ledger entry of %s in %s lay in the future (a stepped clock); replaced by a baseline at now",
                    sid,
                    self.lease.keys.ticks,
                )
        self.queue.end_load()

    def _fire_due(self, token: str, epoch: int) -> None:
        """Claim and enqueue what is due, batch by batch, renewing and
        checking the deadline in between."""
        while not self.stopping.is_set() and self.queue.in_sync:
            batch = self.queue.take(self.clock.now_ms(), BATCH_LIMIT)
            if not batch:
                return
            if not self._within_deadline():
                return
            self._claim(token, epoch, batch)
            self.owed.pay()
            self._renew_if_due()

    def _claim(self, token: str, epoch: int, batch: list[Planned]) -> None:
        unsettled = _Unsettled(batch_id=uuid.uuid4().hex, epoch=epoch, batch=batch, payloads=self._payloads(batch))
        self._unsettled = unsettled
        # Until a reply is read, the queue no longer matches the ledger.
        self.queue.invalidate()
        try:
            reply = self.ledger.claim(token, epoch, unsettled.batch_id, [p.claim for p in batch], unsettled.payloads)
        except (NotLeader, BadRequest):
            self._unsettled = None  # refused before writing anything
            raise
        self._unsettled = None
        self._report_corrupt(reply.corrupt)
        self.queue.in_sync = True
        self._apply(batch, reply.results, reply.server_ms, unsettled.payloads)

    def _payloads(self, batch: list[Planned]) -> list[Payload | None] | None:
        """With a RedisBroker on the lease's Redis, the messages the claim
        script enqueues when it grants them (after the broker's
        ``before_enqueue`` hooks; a message they veto is enqueued later,
        the plain way, as an owed tick)."""
        if self.boundary.mode != Boundary.IN_CLAIM:
            return None
        now = self.clock.now_ms()  # a jittered message's eta: the consumers' shared clock
        out: list[Payload | None] = []
        for item in batch:
            if item.message is None:
                out.append(None)
                continue
            payload = item.payload or self.boundary.payload(
                item.message, jitter_ms(item.schedule, item.message.message_id), now_ms=now
            )
            out.append(payload if self.boundary.before(payload) is None else None)
        return out

    def _encode_ahead(self, schedule: BoundSchedule, message: Any, tick_ms: int) -> Payload:
        """A message built ahead, encoded for the claim script; a jittered
        one is due its jitter after its tick."""
        return self.boundary.payload(message, jitter_ms(schedule, message.message_id), now_ms=tick_ms)

    def _apply(
        self,
        batch: list[Planned],
        results: Sequence[ClaimResult],
        server_ms: int,
        payloads: Sequence[Payload | None] | None = None,
    ) -> None:
        granted: list[Owed] = []
        enqueued: list[Owed] = []
        for index, (item, result) in enumerate(zip(batch, results, strict=True)):
            claim = item.claim
            if result in (ClaimResult.FIRE, ClaimResult.RECORDED, ClaimResult.SKIPPED, ClaimResult.PAUSED):
                # The script overrides the requested outcome for paused and
                # overlapping ticks; report what Redis recorded.
                outcome = {ClaimResult.SKIPPED: Outcome.SKIPPED, ClaimResult.PAUSED: Outcome.PAUSED}.get(
                    result, Outcome(claim.outcome)
                )
                self.observer.tick_decided(schedule_id=claim.schedule_id, outcome=outcome.value)
            if result == ClaimResult.FIRE and item.message is not None:
                owed = Owed(schedule=item.schedule, tick_ms=claim.tick_ms, message=item.message)
                payload = payloads[index] if payloads is not None else None
                if payload is not None:  # the claim script enqueued it
                    self.boundary.after(payload)
                    enqueued.append(owed)
                else:
                    granted.append(owed)
        # What Redis granted is this process's alone to enqueue, whatever
        # the tick queue knows by now (a lost reply may be settled after a
        # step-down emptied it): the broker first, the bookkeeping after.
        self.owed.settled(enqueued, [None] * len(enqueued))
        # All other granted ticks of the batch go to the broker together
        # (one pipelined round trip for a RedisBroker; see enqueue.py).
        self.owed.send(granted)
        self.queue.decided(batch, results, server_ms)

    def _settle(self) -> None:
        """Learn what became of a claim whose reply was lost.  The batch ran
        if and only if its results are in Redis; granted ticks are ours to
        enqueue even if we no longer lead."""
        unsettled = self._unsettled
        if unsettled is None:
            return
        results = self.ledger.batch_results(
            unsettled.batch_id, epoch=unsettled.epoch, claims=[p.claim for p in unsettled.batch]
        )
        if self.ledger.last_settle_corrupt:
            self._report_once(
                f"batch:{unsettled.batch_id}",
                "the result record %s of a claim whose reply was lost was unusable; its results were read back "
                "from the ledger",
                self.lease.keys.batch(unsettled.batch_id),
            )
        self._unsettled = None
        if results is not None and len(results) == len(unsettled.batch):
            self._apply(unsettled.batch, results, self.clock.now_ms(), unsettled.payloads)
        # Either way the queue syncs from the ledger before firing again.
        self.queue.invalidate()

    def _sleep(self) -> None:
        # Nothing is due: build the next ticks' messages now, off the fire path.
        self.queue.build_ahead(self.clock.now_ms())
        now_mono = self.monotonic()
        wake = min(self._renew_at, self._deadline)
        due = self.queue.next_due_ms()
        tick_at = None if due is None else now_mono + max(due - self.clock.precise_ms(), 0.0) / 1000
        if tick_at is not None:
            wake = min(wake, tick_at)
        if self._fire_not_before > now_mono:
            # Nothing fires before then (post-failover wait): sleep until it.
            wake = min(self._renew_at, self._deadline, max(wake, self._fire_not_before))
        retry = self.owed.next_try()
        if retry is not None:
            wake = min(wake, retry)
        pause = max(wake - now_mono, 0.0)
        if self.feed is not None and pause > 2 * BLOCK_MARGIN:
            # Idle: wait on Redis, where a runtime schedule change (or a
            # stop) pushes, instead of polling for changes.
            popped = self.lease.wait_for_push(
                self.feed.notify_key,
                int((pause - BLOCK_MARGIN) * 1000),
                bound_ms=int((self._deadline - self.monotonic()) * 1000),
            )
            self.feed.notified(popped)
            if self.stopping.is_set() or self.feed.pending:
                return
            pause = max(wake - self.monotonic(), 0.0)
        if due is not None and wake == tick_at and pause > WAKE_EARLY:
            # A thread wakes up to a millisecond after its timeout: wake a
            # little early for a tick and wait out the rest in short naps.
            if self.stopping.wait(pause - WAKE_EARLY):
                return
            while not self.stopping.is_set() and self.clock.precise_ms() < due:
                time.sleep(0.0001)
            return
        self.stopping.wait(pause)

    # -- faults and reports ---------------------------------------------------

    def _step_down(self, reason: str) -> None:
        if self.epoch is not None:
            if self.stopping.is_set():  # the shutdown hand-over released it
                self.logger.debug("Cron leadership (epoch %s) ends: stopping.", self.epoch)
            elif self._losses.first_loss_of_lead():
                self.logger.warning(
                    "Lost cron leadership (epoch %s): %s; no further ticks fired by this process.", self.epoch, reason
                )
            else:
                self.logger.info("Lost cron leadership (epoch %s): %s.", self.epoch, reason)
            self.observer.leadership_changed(epoch=self.epoch, leading=False)
        self.epoch = None
        self.lease.forget()
        self.queue.invalidate()
        if self.feed is not None:
            self.feed.forget()  # a follower holds no runtime schedules

    def _healthy(self) -> None:
        if self._fault is not None:
            fault, self._fault = self._fault, None
            if fault == "unreachable":
                self.logger.warning("Cron scheduler reaches Redis again.")
            elif fault.startswith("refused:"):
                self.logger.warning("Redis accepts the cron scheduler's commands again.")
            else:
                self.logger.warning("Cron leader loop works again.")

    def _faulty(self, exc: BaseException, *, refused: str | None = "") -> None:
        """Report a fault once per state change and wait before the next
        turn.  ``refused``: "" for an unreachable Redis, the refusal for a
        reachable one that refuses (one WARNING per kind, whichever command
        met it), None for anything else (a bug: ERROR with traceback)."""
        if refused is None:
            key = f"{type(exc).__name__}: {exc}"
        else:
            key = f"refused:{refused.split(':')[0]}" if refused else "unreachable"
        if key != self._fault:
            self._fault = key
            if refused is None:
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
        if self.leading and self.monotonic() >= self._deadline:
            self._step_down(f"no successful renewal for {int(self.timing.fire_deadline * 1000)} ms")
        if self.leading:
            # Retry the renewal soon, but keep firing nothing past the deadline.
            self._renew_at = self.monotonic()
        self.queue.invalidate()
        self.owed.pay_quietly()
        self.stopping.wait(self.timing.retry_interval)

    def _report_enqueued(self, schedule_id: str, tick_ms: int, lag_ms: int) -> None:
        self.observer.enqueued(schedule_id=schedule_id, tick_ms=tick_ms, lag_ms=lag_ms)

    def _report_corrupt(self, corrupt: Corrupt) -> None:
        for flag, name in _KEY_NAMES.items():
            if corrupt & flag:
                key = getattr(self.lease.keys, name) if name != "batch" else f"{self.lease.keys.tag}:batch:*"
                self._report_once(f"key:{name}", "key %s holds an unusable value; treated as missing", key)

    def _clock_stepped(self, step: ClockStep) -> None:
        self.logger.warning("%s", step.describe())


class _Flapping:
    """Turns a repeating fault into one WARNING: the first occurrence warns,
    repeats within ``quiet`` seconds are reported at INFO."""

    def __init__(self, quiet: float = 600.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.quiet = quiet
        self.monotonic = monotonic
        self._lost_data = -float("inf")
        self._lost_lead = -float("inf")

    def first(self) -> bool:
        """A data loss: True when it is the first for a while."""
        now = self.monotonic()
        first = now - self._lost_data >= self.quiet
        self._lost_data = now
        return first

    def first_loss_of_lead(self) -> bool:
        """A lost leadership: True when it is the first for a while."""
        now = self.monotonic()
        first = now - self._lost_lead >= self.quiet
        self._lost_lead = now
        return first
