"""Firing: one leading turn.

Sync the tick queue with the ledger when it is out of sync, take what is
due in batches bounded in size and in time (batch_size.py), claim each
batch (fenced: Redis refuses a deposed leader's token), apply what Redis
decided (enqueue what it granted), renew before any batch the renewal
would fall due in, then sleep until the next tick or renewal.  The firing
deadline is checked before every batch; the blocking wait for runtime
changes never outlasts the renewal's due time.  A claim whose reply was
lost is settled before anything else, even after a step-down: what Redis
granted is this process's to enqueue.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

import redis

from ..schedules.outcome import VALUES as OUTCOMES
from ..schedules.planner import jitter_ms
from ..schedules.schedule import BoundSchedule
from ..stop_request import StopRequest
from ..store.abc import Store
from ..store.boundary import Boundary, BrokerBoundary, Payload
from ..store.codes import ClaimResult, Outcome
from ..store.collector import collector_paused
from ..store.ledger import BadRequest, NotLeader, SyncEntry
from ..store.timing import Timing
from .batch_size import MARGIN, BatchSize
from .candidates import ScheduleSets
from .declared import Declared
from .leadership import Leadership
from .owed import Owed, OwedQueue
from .reports import Reports
from .runtime_feed import RuntimeFeed
from .tick_queue import Planned, TickQueue

__all__ = ["BATCH_LIMIT", "BLOCK_MARGIN", "WAKE_EARLY", "Firing", "LeaderObserver"]

#: The most claims a batch holds: a short script, so no script blocks Redis
#: (and the broker's consumers on it) for long.  Fewer when they would not
#: fit the batch's share of the renewal interval (see batch_size.py).
BATCH_LIMIT = 1000

#: How long before a tick the leader wakes, to wait out the rest in short
#: naps: thread wake-ups come up to a millisecond late.
WAKE_EARLY = 0.002

#: An idle leader waits on Redis for runtime schedule changes (on its
#: subscription, sending nothing) until this long before it must wake, and
#: the rest locally, in short naps before a tick.
BLOCK_MARGIN = 0.15

_RECORDED = (ClaimResult.FIRE, ClaimResult.RECORDED, ClaimResult.SKIPPED, ClaimResult.PAUSED)


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

    def replicas_confirmed(self, *, confirmed: bool) -> None:
        """Redis replicas stopped (False) or resumed (True) acknowledging
        this process's writes: nothing fires meanwhile."""


@dataclasses.dataclass
class _Unsettled:
    """A claim sent to Redis whose reply was not read."""

    batch_id: str
    epoch: int
    batch: list[Planned]
    payloads: list[Payload | None] | None


class Firing:
    """Fires due ticks while leading.

    Parameters:
      store: The lease, ledger, runtime reads, clock and keys.
      declared: The declared schedules and actors.
      boundary: How granted ticks reach the broker.
      owed: Granted ticks whose enqueue is to be retried.
      timing: Every duration (a decided one-shot's retention too).
      reports: The leader's reports.
      observer: Told about renewals and decided ticks.
      stopping: The thread's stop request (ends a batch loop or a sleep).
    """

    def __init__(
        self,
        *,
        store: Store,
        declared: Declared,
        boundary: BrokerBoundary,
        owed: OwedQueue,
        timing: Timing,
        reports: Reports,
        observer: LeaderObserver,
        stopping: StopRequest,
    ) -> None:
        self.lease = store.lease
        self.ledger = store.ledger
        self.clock = store.clock
        self.keys = store.keys
        self.boundary = boundary
        self.owed = owed
        #: This process's schedule set, checked against the candidates'
        #: at every renewal.
        self.schedule_sets = ScheduleSets(
            declared.schedules, lease=store.lease, ledger=store.ledger, keys=store.keys, logger=reports.logger
        )
        self.timing = timing
        self.logger = reports.logger
        self.observer = observer
        self.reports = reports
        self.stopping = stopping
        self.monotonic = store.clock.monotonic
        self.queue = TickQueue(
            declared.schedules,
            prefix=store.keys.prefix,
            now_ms=store.clock.now_ms,
            encode=self._encode_ahead if boundary.mode == Boundary.IN_CLAIM else None,
        )
        self.feed = (
            RuntimeFeed(
                store.runtime,
                keys=store.keys,
                queue=self.queue,
                ledger=store.ledger,
                declared=declared,
                clock=store.clock,
                report_once=reports.once,
                one_shot_retention_ms=timing.one_shot_retention_ms,
            )
            if store.runtime is not None
            else None
        )
        self.sizes = BatchSize(fire_deadline=timing.fire_deadline, limit=BATCH_LIMIT)
        self._unsettled: _Unsettled | None = None
        #: Staged messages may wait in the outbox (durable claims): a
        #: claimer died or its publish failed.  Drained while leading.
        self._outbox_pending = False
        #: Claims Redis granted (a write it accepted, confirmed where asked):
        #: a turn that fails after one still ended the fault before it.
        self.granted = 0

    def forget(self) -> None:
        """A term begins or ends: read the ledger (and every runtime
        schedule) again before the next fire, and look for staged
        messages a previous leader left."""
        self._outbox_pending = self.ledger.stages
        self.queue.invalidate()
        if self.feed is not None:
            self.feed.forget()  # a follower holds no runtime schedules

    def lead(self, term: Leadership, *, sleep: bool = True) -> None:
        """One leading turn, ending in a sleep until the next tick or
        renewal unless ``sleep`` is False (a fake clock drives the turns).
        Raises :class:`~.leadership.Expired` past the firing deadline and
        :class:`~..store.ledger.NotLeader` when Redis refuses the token."""
        term.check(self.monotonic(), self.timing)
        reload = self.feed is not None and self.feed.stale
        if reload or not self.queue.in_sync:
            with collector_paused():  # a takeover allocates an object or more per schedule
                if self.feed is not None and reload:
                    self.feed.reload()  # all of them, before the sync
                self._sync(term)
        # Ticks first: a turn wakes at a tick, and the renewal and the
        # version read (due at turns too) would only delay it.  The firing
        # deadline, checked above and between batches, keeps this safe.
        if self.monotonic() >= term.fire_not_before:
            self._fire_due(term)
        self._renew_if_due(term)
        if self._outbox_pending and self._unsettled is None:
            self._drain_outbox()
        if self.feed is not None:
            self.feed.follow(term.token, term.epoch)
        self.owed.pay()
        # Nothing is due: build the next ticks' messages now, off the fire path.
        self.queue.build_ahead(self.clock.now_ms())
        if sleep:
            self._sleep(term)

    def _renew_if_due(self, term: Leadership, *, ahead: float = 0.0) -> None:
        """Renew when due, or when it falls due within ``ahead`` seconds
        (the work about to start would otherwise delay it)."""
        now = self.monotonic()
        if now + ahead < term.renew_at:
            return
        renewed = self.lease.renew()
        if renewed is None:
            raise NotLeader()
        self.observer.renewed(latency_ms=(self.monotonic() - now) * 1000)
        term.renewed(now, self.timing)
        self.schedule_sets.check(renewed.live)
        if self.feed is not None:
            self.feed.renewed(renewed.runtime_version)

    def _sync(self, term: Leadership) -> None:
        # Baselines are the server's now, unless its clock jumped ahead and
        # we ignore that: then our own estimate, so nothing is set in the
        # future.
        self.queue.begin_load()
        reply = self.ledger.sync(
            term.token,
            term.epoch,
            [SyncEntry.of(s) for s in self.queue.schedules.values()],
            now_ms=self.clock.now_ms() if self.clock.ignoring_step else None,
            expect_ledger=term.expect_ledger,
            on_chunk=self.queue.load_part,  # next ticks computed while Redis reads the next chunks
        )
        self.reports.synced(reply)
        self.queue.end_load()

    def _fire_due(self, term: Leadership) -> None:
        """Claim and enqueue what is due, batch by batch, each sized to
        last a share of the firing deadline, renewing before a batch the
        renewal would fall due in and checking the deadline in between: so
        a backlog of any size, on a machine of any speed, is worked off
        under one lease."""
        backlog = False
        while not self.stopping.is_set() and self.queue.in_sync:
            started = self.monotonic()
            batch = self.queue.take(self.clock.now_ms(), self.sizes.next())
            if not batch:
                return
            planned = self.monotonic()
            # The renewal goes first when it would fall due during the batch
            # (at the pace batches go), and before every batch of a backlog
            # after the first: a loaded machine or a collection can stretch
            # a batch far past its estimate, and a renewal never waits
            # behind one, so from one renewal to the next lies at most one
            # batch's work (one round trip per batch of up to BATCH_LIMIT).
            self._renew_if_due(term, ahead=math.inf if backlog else MARGIN * self.sizes.expected(len(batch)))
            term.check(self.monotonic(), self.timing)
            claimed = self.monotonic()
            self._claim(term, batch)
            self.owed.pay()
            self.sizes.measured(len(batch), planned - started + self.monotonic() - claimed)
            backlog = True

    def _claim(self, term: Leadership, batch: list[Planned]) -> None:
        unsettled = _Unsettled(batch_id=uuid.uuid4().hex, epoch=term.epoch, batch=batch, payloads=self._payloads(batch))
        self._unsettled = unsettled
        self.queue.sent(batch)
        try:
            reply = self.ledger.claim(
                term.token, term.epoch, unsettled.batch_id, [p.claim for p in batch], unsettled.payloads
            )
        except (NotLeader, BadRequest):
            self._unsettled = None  # refused before writing anything
            raise
        self._unsettled, self.granted = None, self.granted + 1  # granted: written, confirmed where asked
        self.reports.corrupt(reply.corrupt)
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
            message = item.message
            if message is None:
                out.append(None)
            else:  # built ahead, else encoded now (a Payload is never falsy)
                out.append(item.payload or self._encode_ahead(item.schedule, message, now))
        # Only the middleware that define ``before_enqueue`` run, per batch.
        return self.boundary.before_many(out)

    def _encode_ahead(self, schedule: BoundSchedule, message: Any, now_ms: int) -> Payload:
        """A message encoded for the claim script (built ahead: ``now_ms`` is
        its tick); a jittered one is due its jitter after ``now_ms``."""
        return self.boundary.payload(
            message, jitter_ms(schedule, message.message_id), now_ms=now_ms, template=(schedule.id, schedule)
        )

    def _apply(
        self,
        batch: list[Planned],
        results: Sequence[ClaimResult],
        server_ms: int,
        payloads: Sequence[Payload | None] | None = None,
        *,
        settling: bool = False,
    ) -> None:
        granted: list[Owed] = []
        enqueued: list[Owed] = []
        pushed: list[Payload] = []
        tick_decided = self.observer.tick_decided
        # Outcomes by what the script recorded: it overrides the requested
        # one for paused and overlapping ticks; report what Redis recorded.
        overridden = {ClaimResult.SKIPPED: Outcome.SKIPPED.value, ClaimResult.PAUSED: Outcome.PAUSED.value}
        fire = ClaimResult.FIRE
        for index, (item, result) in enumerate(zip(batch, results, strict=True)):
            if result in _RECORDED:
                claim = item.claim
                tick_decided(
                    schedule_id=claim.schedule_id,
                    outcome=overridden.get(result) or OUTCOMES.get(claim.outcome, claim.outcome),
                )
            if result == fire and item.message is not None:
                owed = Owed(schedule=item.schedule, tick_ms=item.claim.tick_ms, message=item.message)
                payload = payloads[index] if payloads is not None else None
                if payload is not None:  # the claim script enqueued (or staged) it
                    pushed.append(payload)
                    enqueued.append(owed)
                else:
                    granted.append(owed)
        staged: list[Payload] = []
        if self.ledger.stages:
            staged = pushed
        else:
            self.boundary.after_many(pushed)
        # Staged messages of a claim replicas hold: into their queues now
        # (whoever publishes one first runs its hooks).
        self._publish(staged)
        # What Redis granted is this process's alone to enqueue, whatever
        # the tick queue knows by now (a lost reply may be settled after a
        # step-down emptied it): the broker first, the bookkeeping after.
        self.owed.settled(enqueued, [None] * len(enqueued))
        # All other granted ticks of the batch go to the broker together
        # (one pipelined round trip for a RedisBroker; see boundary.py).
        # (Settled late, a reply may come after its definition was removed.)
        self.owed.send(granted, recheck=settling)
        self.queue.decided(batch, results, server_ms)

    def _publish(self, staged: list[Payload]) -> None:
        """Publish staged messages, running the broker's ``after_enqueue``
        hooks for those this call pushed; on a fault they stay staged, for
        the outbox drain."""
        if not staged:
            return
        try:
            published = self.ledger.publish(staged)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self._outbox_pending = True
            return
        for payload, pushed in zip(staged, published, strict=True):
            if pushed:
                self.boundary.after(payload)

    def _drain_outbox(self) -> None:
        """Publish messages staged by durable claims that nobody published
        (this leader's writes are acknowledged by replicas, and so is
        everything written before them)."""
        staged = self.ledger.staged(BATCH_LIMIT)
        self._outbox_pending = len(staged) == BATCH_LIMIT
        now = self.clock.now_ms()
        self._publish([_with_delay(p, now) for p in staged])

    def settle(self) -> None:
        """Learn what became of a claim whose reply was lost.  The batch ran
        if and only if its results are in Redis; granted ticks are ours to
        enqueue even if we no longer lead."""
        unsettled = self._unsettled
        if unsettled is None:
            return
        settled = self.ledger.settle(
            unsettled.batch_id, epoch=unsettled.epoch, claims=[p.claim for p in unsettled.batch]
        )
        if settled.record_corrupt:
            self.reports.once(
                f"batch:{unsettled.batch_id}",
                "the result record %s of a claim whose reply was lost was unusable; its results were read back "
                "from the ledger",
                self.keys.batch(unsettled.batch_id),
            )
        self._unsettled = None
        results = settled.results
        if results is not None and len(results) == len(unsettled.batch):
            self._apply(unsettled.batch, results, self.clock.now_ms(), unsettled.payloads, settling=True)
        # Either way the queue syncs from the ledger before firing again.
        self.queue.invalidate()

    def _sleep(self, term: Leadership) -> None:
        now_mono = self.monotonic()
        wake = min(term.renew_at, term.deadline)
        due = self.queue.next_due_ms()
        tick_at = None if due is None else now_mono + max(due - self.clock.precise_ms(), 0.0) / 1000
        if tick_at is not None:
            wake = min(wake, tick_at)
        if term.fire_not_before > now_mono:
            # Nothing fires before then (post-failover wait): sleep until it.
            wake = min(term.renew_at, term.deadline, max(wake, term.fire_not_before))
        retry = self.owed.next_try()
        if retry is not None:
            wake = min(wake, retry)
        pause = max(wake - now_mono, 0.0)
        if self.feed is not None and pause > 2 * BLOCK_MARGIN:
            # Idle: wait on Redis, where a runtime schedule change (or a
            # stop) is published, instead of polling for changes: the
            # renewal is an idle leader's only command.  Never past the
            # renewal: on a starved machine this thread can be a second
            # late, and waiting up to the firing deadline left no time to
            # renew before it.
            popped = self.lease.wait_for_push(
                self.feed.notify_key,
                int((pause - BLOCK_MARGIN) * 1000),
                bound_ms=int((min(term.renew_at, term.deadline) - self.monotonic()) * 1000),
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


def _with_delay(payload: Payload, now_ms: int) -> Payload:
    """A staged message with its delay at ``now_ms`` (a jittered one's
    ``eta`` ahead), as the broker's hooks see it."""
    eta = payload.message.options.get("eta")
    return dataclasses.replace(payload, delay=max(eta - now_ms, 0) or None) if isinstance(eta, int) else payload
