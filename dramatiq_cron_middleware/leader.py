"""The leader loop: one background thread per worker process.

While following, the thread blocks on Redis until the lease is released or
is due to expire, then competes for it.  While leading, it sleeps until the
next tick or renewal, decides due ticks in one fenced claim, and enqueues
the ticks Redis granted.  It stops firing at its own monotonic deadline
when renewals fail, and steps down the moment Redis refuses its token.
Faults are logged once per state change, never once per retry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import logging
import threading
import time
import uuid
from datetime import datetime
from typing import Any

import redis
from dramatiq import Broker, Message

from .clock import Clock
from .connection import redact
from .enqueue import enqueue_many
from .lease import Acquired, Lease
from .ledger import FIRE, LOST, PAUSED, REFUSED, SKIPPED, Claim, Ledger, NotLeader, Outcome
from .schedule import BoundSchedule

__all__ = ["LeaderObserver", "LeaderThread", "due_claims", "firing_claim", "message_for", "ON_TIME_MS"]

#: A tick enqueued within this long after it fell due counts as on time;
#: later ones are catch-up, subject to the schedule's catch-up policy.
ON_TIME_MS = 1000

_MESSAGE_IDS = uuid.UUID("4c1f6a52-6a8e-4d0e-9a57-2f0c2a1e7c11")
_FAULTS = (redis.ConnectionError, redis.TimeoutError, OSError)


def message_for(schedule: BoundSchedule, tick_ms: int, *, prefix: str, manual: bool = False) -> Message[Any]:
    """The message a schedule sends for a tick; its id is derived from
    (prefix, schedule, tick) so consumers can deduplicate."""
    tick = datetime.fromtimestamp(tick_ms / 1000, tz=schedule.zone).isoformat()
    options: dict[str, Any] = dict(schedule.options)
    options["cron_tick"] = tick
    options["cron_schedule"] = schedule.id
    if schedule.max_age is not None:
        options["max_age"] = schedule.max_age
    if schedule.overlap == "skip":
        # Tells the worker that finishes the message to clear the
        # schedule's running mark (see overlap.py).
        options["cron_overlap"] = "skip"
    if manual:
        options["cron_manual"] = True
        message_id = str(uuid.uuid4())
    else:
        message_id = str(uuid.uuid5(_MESSAGE_IDS, f"{prefix}|{schedule.id}|{tick_ms}"))
    return Message(
        queue_name=schedule.queue_name,
        actor_name=schedule.actor_name,
        args=tuple(schedule.args),
        kwargs=dict(schedule.kwargs),
        options=options,
        message_id=message_id,
    )


def jitter_ms(schedule: BoundSchedule, message_id: str) -> int:
    """A delay in ``[0, jitter]``, the same for every attempt at a tick."""
    if schedule.jitter <= 0:
        return 0
    digest = hashlib.sha256(message_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % (schedule.jitter + 1)


def due_claims(schedule: BoundSchedule, last: int, now: int, *, prefix: str) -> list[tuple[Claim, Message[Any] | None]]:
    """Turn a schedule's ticks due since ``last`` (its last decided tick)
    into claims at ``now``, per its catch-up policy, each firing claim with
    the message it would send.  Ticks older than the window are recorded as
    missed in one entry, not enumerated.  Pure: the leader and
    ``testing.CronSimulator`` decide alike."""
    out: list[tuple[Claim, Message[Any] | None]] = []
    # A tick reached within ON_TIME_MS is on time, not catch-up: no window,
    # however small, turns it into a missed one.
    window_start = now - max(schedule.catch_up_window, ON_TIME_MS)
    first = schedule.next_after(last)
    if first > now:
        return out
    start = last
    if first <= window_start:
        last_missed = schedule.last_before(window_start + 1)
        detail = f"outside the catch-up window, from {first}"
        out.append((_missed(schedule, last_missed, detail), None))
        start = last_missed
    due = list(schedule.ticks_between(start, now))
    if not due:
        return out
    if schedule.catch_up == "latest":
        fire, skip = due[-1:], due[:-1]
    elif schedule.catch_up == "none":
        fire = [t for t in due if now - t <= ON_TIME_MS]
        skip = [t for t in due if now - t > ON_TIME_MS]
    else:
        fire, skip = due, []
    if skip:
        detail = f"{len(skip)} ticks from {skip[0]} (catch_up={schedule.catch_up})"
        out.append((_missed(schedule, skip[-1], detail), None))
    for tick in fire:
        message = message_for(schedule, tick, prefix=prefix)
        out.append((firing_claim(schedule, tick, now, message), message))
    return out


def firing_claim(schedule: BoundSchedule, tick: int, now: int, message: Message[Any]) -> Claim:
    """The claim that fires ``tick`` with ``message``, decided at ``now``."""
    return Claim(
        schedule_id=schedule.id,
        tick_ms=tick,
        outcome=Outcome.CAUGHT_UP if now - tick > ON_TIME_MS else Outcome.FIRED,
        fire=True,
        detail=str(now - tick),
        message_id=message.message_id,
        overlap_ttl_ms=schedule.overlap_ttl if schedule.overlap == "skip" else 0,
    )


def _missed(schedule: BoundSchedule, tick: int, detail: str) -> Claim:
    return Claim(schedule_id=schedule.id, tick_ms=tick, outcome=Outcome.MISSED, fire=False, detail=detail)


@dataclasses.dataclass
class _Owed:
    """A tick Redis granted whose enqueue has not succeeded yet."""

    schedule: BoundSchedule
    tick_ms: int
    message: Message[Any]
    next_try: float
    attempts: int = 0


@dataclasses.dataclass
class _Batch:
    """A claim sent to Redis whose reply has not been read yet."""

    batch_id: str
    claims: list[Claim]
    messages: dict[int, tuple[BoundSchedule, Message[Any]]]


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


class LeaderThread(threading.Thread):
    """Competes for the lease and, while leading, fires due ticks.

    Parameters:
      broker: Where messages are enqueued.
      schedules: Every schedule declared on the broker.
      lease, ledger, clock: The Redis-side collaborators.
      prefix: The key prefix (part of every deterministic message id).
      ttl_ms: The lease length.
      logger: Where state changes are reported.
      observer: Told about leadership, renewals and decided ticks.
        Defaults to None, meaning nobody listens.
    """

    def __init__(
        self,
        *,
        broker: Broker,
        schedules: list[BoundSchedule],
        lease: Lease,
        ledger: Ledger,
        clock: Clock,
        prefix: str,
        ttl_ms: int,
        logger: logging.Logger,
        observer: LeaderObserver | None = None,
        fast_takeover_ms: int | None = None,
    ) -> None:
        super().__init__(name="dramatiq-cron-leader", daemon=True)
        self.observer = observer or LeaderObserver()
        self.fast_takeover_ms = fast_takeover_ms
        self.broker = broker
        self.schedules = {s.id: s for s in schedules}
        self.lease = lease
        self.ledger = ledger
        self.clock = clock
        self.prefix = prefix
        self.ttl_ms = ttl_ms
        self.logger = logger
        # Renew every third of the lease (as etcd does); stop firing two
        # thirds into it without a successful renewal, leaving a third of
        # the lease as margin against clock-rate error and slow replies.
        self.renew_interval = ttl_ms / 3000
        self.fire_deadline = 2 * ttl_ms / 3000
        self.retry_interval = min(1.0, ttl_ms / 6000)
        self.stopping = threading.Event()
        self.epoch: int | None = None
        self._renew_at = 0.0
        self._deadline = 0.0
        self._fire_not_before = 0.0
        self._seen_epoch = False
        self._failover_suspected = False
        self._synced = False
        self._last: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []
        self._owed: list[_Owed] = []
        self._unsettled: _Batch | None = None
        self._upcoming: dict[str, tuple[int, Message[Any]]] = {}
        self._release_lock = threading.Lock()
        self._released = False
        self._reachable = True
        self._enqueue_failing = False
        self._unexpected: str | None = None

    # -- life cycle ---------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this process currently leads (as far as it knows)."""
        return self.epoch is not None

    def request_stop(self) -> None:
        """Ask the loop to stop; safe to call from a signal handler (it only
        sets an event).  A leader then releases the lease from its own
        thread at once, without waiting for the worker to drain."""
        self.stopping.set()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the loop and release the lease if held (compare-and-delete)."""
        self.stopping.set()
        if self.is_alive() and not self.leading:
            try:
                self.lease.wake_self()
            except _FAULTS:
                pass
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
        self._release()

    def _release(self) -> None:
        with self._release_lock:
            if self._released:
                return
            self._released = True
            was_leading = self.leading
            epoch = self.epoch
            self.epoch = None
            if epoch is not None:
                self.observer.leadership_changed(epoch=epoch, leading=False)
            self._release_from_redis(was_leading, epoch)

    def _release_from_redis(self, was_leading: bool, epoch: int | None) -> None:
        try:
            released = self.lease.release()
        except _FAULTS as exc:
            if was_leading:
                self.logger.warning(
                    "Could not release the cron lease (epoch %s): %s; it expires within %d ms.",
                    epoch,
                    redact(str(exc)),
                    self.ttl_ms,
                )
            return
        if was_leading and released:
            self.logger.info("Released cron leadership (epoch %s).", epoch)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self._unsettled is not None:
                    self._settle()
                if self.leading:
                    self._lead()
                else:
                    self._follow()
                self._set_reachable(True)
                self._unexpected = None
            except NotLeader:
                self._step_down("Redis holds another leader's token")
            except redis.ReadOnlyError as exc:
                # A replica answered: a failover is under way or just happened.
                self._failover_suspected = True
                self._set_reachable(False, exc)
                self._on_fault()
            except _FAULTS as exc:
                self._set_reachable(False, exc)
                self._on_fault()
            except Exception as exc:  # a bug or an unforeseen reply: report once, keep going
                key = f"{type(exc).__name__}: {exc}"
                if key != self._unexpected:
                    self._unexpected = key
                    self.logger.error("Cron leader loop failed: %s", redact(key), exc_info=True)
                self._on_fault()
        # Stopped: give the lease up right away so a follower takes over in
        # milliseconds, while the worker may still be draining messages.
        self._release()
        # Last chance for granted ticks whose enqueue failed.
        self._pay_owed_quietly()

    # -- following ------------------------------------------------------------

    def _follow(self) -> None:
        sent = time.monotonic()
        result = self.lease.acquire()
        if isinstance(result, Acquired):
            self._become_leader(result, sent)
            return
        self._set_reachable(True)
        # Someone holds the lease, so an epoch exists: if it later vanishes,
        # that is data loss, and this process must wait before firing.
        self._seen_epoch = True
        remaining = result.remaining_ms
        wait = self.ttl_ms if remaining < 0 else min(remaining + 5, self.ttl_ms)
        if remaining == -2:  # vanished between the check and PTTL
            wait = 1
        # Ticks granted to this process while it led stay its own to enqueue.
        self._pay_owed()
        if self._owed:
            retry_in = min(o.next_try for o in self._owed) - time.monotonic()
            wait = max(1, min(wait, int(retry_in * 1000) + 1))
        if self.stopping.is_set():
            return
        if self.fast_takeover_ms is None:
            self.lease.wait_for_release(wait)
            return
        # Fast takeover: wait in short slices, and between them check whether
        # the leader's process is gone (its presence connection closed).
        deadline = time.monotonic() + wait / 1000
        while not self.stopping.is_set():
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0 or self.lease.wait_for_release(min(left, self.fast_takeover_ms)):
                return
            if self.lease.depose_if_gone():
                self.logger.info(
                    "The cron leader's connection to Redis is gone; taking over without waiting for its lease."
                )
                return

    def _become_leader(self, acquired: Acquired, sent: float) -> None:
        self.epoch = acquired.epoch
        self._deadline = sent + self.fire_deadline
        self._renew_at = sent + self.renew_interval
        self._synced = False
        suspect = self._failover_suspected or (acquired.epoch_was_missing and self._seen_epoch)
        self._seen_epoch = True
        self._failover_suspected = False
        if suspect:
            # A write acknowledged by the old master may be missing here; wait
            # until any previous leader's lease has certainly run out.
            self._fire_not_before = sent + self.ttl_ms / 1000
            self.logger.warning(
                "Acquired cron leadership (epoch %d) after a suspected Redis failover or data loss; "
                "first fire delayed by %d ms.",
                acquired.epoch,
                self.ttl_ms,
            )
        else:
            self._fire_not_before = 0.0
            self.logger.info(
                "Acquired cron leadership (epoch %d) on %s pid %d.", acquired.epoch, self.lease.host, self.lease.pid
            )
        self.observer.leadership_changed(epoch=acquired.epoch, leading=True)

    # -- leading --------------------------------------------------------------

    def _lead(self) -> None:
        now = time.monotonic()
        if now >= self._renew_at:
            if not self.lease.renew():
                raise NotLeader()
            self.observer.renewed(latency_ms=(time.monotonic() - now) * 1000)
            self._deadline = now + self.fire_deadline
            self._renew_at = now + self.renew_interval
        if time.monotonic() >= self._deadline:
            self._step_down(f"no successful renewal for {int(self.fire_deadline * 1000)} ms")
            return
        token, epoch = self.lease.token, self.epoch
        if token is None or epoch is None:  # released by stop() on another thread
            return
        if not self._synced:
            self._sync(token, epoch)
        if time.monotonic() >= self._fire_not_before:
            self._fire_due(token, epoch)
        self._pay_owed()
        self._sleep()

    def _sync(self, token: str, epoch: int) -> None:
        last = self.ledger.sync(token, epoch, list(self.schedules))
        self._last = {sid: entry.tick_ms for sid, entry in last.items()}
        self._heap = [(self.schedules[sid].next_after(tick), sid) for sid, tick in self._last.items()]
        heapq.heapify(self._heap)
        self._synced = True

    def _fire_due(self, token: str, epoch: int) -> None:
        now = self.clock.now_ms()
        claims: list[Claim] = []
        messages: dict[int, tuple[BoundSchedule, Message[Any]]] = {}
        touched: list[str] = []
        try:
            while self._heap and self._heap[0][0] <= now:
                tick, sid = heapq.heappop(self._heap)
                touched.append(sid)
                schedule = self.schedules[sid]
                if now - tick < ON_TIME_MS and tick > self._last[sid]:
                    # The common case, on the fire-lag path: the heap holds the
                    # first tick after the last decided one, it is on time, and
                    # (ticks being at least a second apart) it is the only one
                    # due, so no cron arithmetic is needed.  This is exactly
                    # what due_claims decides for it.
                    ready = self._message(schedule, tick)
                    messages[len(claims)] = (schedule, ready)
                    claims.append(firing_claim(schedule, tick, now, ready))
                    continue
                for claim, message in due_claims(schedule, self._last[sid], now, prefix=self.prefix):
                    if message is not None:
                        messages[len(claims)] = (schedule, message)
                    claims.append(claim)
        except BaseException:
            # Schedules already popped would vanish from the heap: rebuild it
            # from the ledger before anything else.
            self._synced = False
            raise
        if not claims:
            for sid in touched:
                self._reschedule(sid, now)
            return
        if time.monotonic() >= self._deadline:
            self._step_down(f"no successful renewal for {int(self.fire_deadline * 1000)} ms")
            return
        batch = _Batch(batch_id=uuid.uuid4().hex, claims=claims, messages=messages)
        self._unsettled = batch
        # Whatever happens next, the heap is rebuilt from the ledger unless
        # the claim succeeds below.
        self._synced = False
        try:
            results = self.ledger.claim(token, epoch, batch.batch_id, claims)
        except NotLeader:
            self._unsettled = None  # refused before writing anything
            raise
        self._unsettled = None
        self._apply(batch, results)
        latest: dict[str, int] = {}
        for claim in claims:
            latest[claim.schedule_id] = max(claim.tick_ms, latest.get(claim.schedule_id, claim.tick_ms))
        for sid in touched:
            self._last[sid] = max(latest.get(sid, self._last[sid]), self._last[sid])
            self._reschedule(sid, now)
        if all(r not in (LOST, REFUSED) for r in results):
            self._synced = True

    def _reschedule(self, sid: str, now: int) -> None:
        """Put a schedule back on the heap at its next tick, and (off the
        fire-lag path) build that tick's message ahead of time."""
        schedule = self.schedules[sid]
        upcoming = schedule.next_after(max(self._last[sid], now))
        heapq.heappush(self._heap, (upcoming, sid))
        self._upcoming[sid] = (upcoming, message_for(schedule, upcoming, prefix=self.prefix))

    def _message(self, schedule: BoundSchedule, tick: int) -> Message[Any]:
        """The message for a tick, from the one built ahead of time if any
        (restamped: dramatiq's AgeLimit counts from the timestamp)."""
        cached = self._upcoming.pop(schedule.id, None)
        if cached is not None and cached[0] == tick:
            return dataclasses.replace(cached[1], message_timestamp=int(time.time() * 1000))
        return message_for(schedule, tick, prefix=self.prefix)

    def _apply(self, batch: _Batch, results: list[int]) -> None:
        granted: list[_Owed] = []
        for index, (claim, result) in enumerate(zip(batch.claims, results, strict=True)):
            # The script overrides the requested outcome for paused and
            # overlapping ticks; report what Redis recorded.
            outcome = {SKIPPED: Outcome.SKIPPED, PAUSED: Outcome.PAUSED}.get(result, claim.outcome)
            if result not in (REFUSED, LOST):
                self.observer.tick_decided(schedule_id=claim.schedule_id, outcome=outcome)
            if result == FIRE and index in batch.messages:
                schedule, message = batch.messages[index]
                granted.append(_Owed(schedule=schedule, tick_ms=claim.tick_ms, message=message, next_try=0.0))
            elif result in (SKIPPED, PAUSED):
                self.logger.debug("Tick %s of %s %s.", claim.tick_ms, claim.schedule_id, outcome)
        # All granted ticks of the batch go to the broker together (one
        # pipelined round trip for a RedisBroker; see enqueue.py).
        self._enqueue(granted)

    def _settle(self) -> None:
        """Learn what became of a claim whose reply was lost.  The batch ran
        if and only if its results are in Redis; granted ticks are ours to
        enqueue even if we no longer lead."""
        batch = self._unsettled
        if batch is None:
            return
        results = self.ledger.batch_results(batch.batch_id)
        self._unsettled = None
        if results is not None:
            self._apply(batch, results)

    def _enqueue(self, owed: list[_Owed]) -> list[bool]:
        """Enqueue granted ticks; a failure goes to the owed list, to be
        retried with the same message id.  True per tick that made it."""
        for item in owed:
            item.attempts += 1
        failures = enqueue_many(
            self.broker, [(o.message, jitter_ms(o.schedule, o.message.message_id) or None) for o in owed]
        )
        return [
            self._enqueue_failed(item, exc) if exc is not None else self._enqueued(item)
            for item, exc in zip(owed, failures, strict=True)
        ]

    def _try_enqueue(self, owed: _Owed) -> bool:
        return self._enqueue([owed])[0]

    def _enqueue_failed(self, owed: _Owed, exc: BaseException) -> bool:
        if not self._enqueue_failing:
            self._enqueue_failing = True
            self.logger.warning(
                "Enqueueing cron messages fails (%s); tick %s of %s and any later ones are retried "
                "with the same message id.",
                redact(f"{type(exc).__name__}: {exc}"),
                owed.message.options["cron_tick"],
                owed.schedule.id,
            )
        owed.next_try = time.monotonic() + min(0.1 * 2**owed.attempts, 5.0)
        if owed not in self._owed:
            self._owed.append(owed)
        return False

    def _enqueued(self, owed: _Owed) -> bool:
        if self._enqueue_failing:
            self._enqueue_failing = False
            self.logger.warning("Enqueueing cron messages works again.")
        self.observer.enqueued(
            schedule_id=owed.schedule.id, tick_ms=owed.tick_ms, lag_ms=self.clock.now_ms() - owed.tick_ms
        )
        self.logger.debug(
            "Enqueued %s for tick %s (message %s).",
            owed.schedule.id,
            owed.message.options["cron_tick"],
            owed.message.message_id,
        )
        return True

    def _pay_owed(self) -> None:
        """Retry granted ticks whose enqueue failed.  They are ours alone (the
        ledger refuses them to everyone else), so retrying even after losing
        the lease fires them late, but once."""
        if not self._owed:
            return
        now = time.monotonic()
        for owed in list(self._owed):
            if owed.next_try > now:
                continue
            if self._try_enqueue(owed):
                self._owed.remove(owed)
            elif self.clock.now_ms() - owed.tick_ms > owed.schedule.catch_up_window:
                self._owed.remove(owed)
                self.logger.warning(
                    "Gave up enqueueing tick %s of %s after %d attempts.",
                    owed.message.options["cron_tick"],
                    owed.schedule.id,
                    owed.attempts,
                )

    def _sleep(self) -> None:
        now_mono = time.monotonic()
        wake = min(self._renew_at, self._deadline)
        if self._heap:
            due_in = (self._heap[0][0] - self.clock.now_ms()) / 1000
            wake = min(wake, now_mono + max(due_in, 0.0))
            if self._fire_not_before > now_mono:
                # Nothing fires before then (post-failover wait): sleep until it.
                wake = min(self._renew_at, self._deadline, max(wake, self._fire_not_before))
        if self._owed:
            wake = min(wake, min(o.next_try for o in self._owed))
        self.stopping.wait(max(wake - now_mono, 0.0))

    # -- faults ---------------------------------------------------------------

    def _on_fault(self) -> None:
        if self.leading and time.monotonic() >= self._deadline:
            self._step_down(f"no successful renewal for {int(self.fire_deadline * 1000)} ms")
        if self.leading:
            # Retry the renewal soon, but keep firing nothing past the deadline.
            self._renew_at = time.monotonic()
        self._pay_owed_quietly()
        self.stopping.wait(self.retry_interval)

    def _pay_owed_quietly(self) -> None:
        try:
            self._pay_owed()
        except Exception:  # the clock or broker may be down too; retried later
            pass

    def _step_down(self, reason: str) -> None:
        if self.epoch is not None:
            self.logger.warning(
                "Lost cron leadership (epoch %s): %s; no further ticks fired by this process.", self.epoch, reason
            )
            self.observer.leadership_changed(epoch=self.epoch, leading=False)
        self.epoch = None
        self.lease.forget()
        self._synced = False

    def _set_reachable(self, reachable: bool, exc: BaseException | None = None) -> None:
        if reachable == self._reachable:
            return
        self._reachable = reachable
        if reachable:
            self.logger.warning("Cron scheduler reaches Redis again.")
        else:
            self.logger.warning(
                "Cron scheduler cannot reach Redis (%s); retrying every %d ms.",
                redact(f"{type(exc).__name__}: {exc}"),
                int(self.retry_interval * 1000),
            )
