"""The tick queue: the leader's picture of what comes next.

For every schedule it holds the last tick the ledger decided, the next tick
(in a heap, so nothing scans all schedules per tick) and, for on-time
ticks, the message built ahead of time.  It owns one invariant, and is
its only writer: while :attr:`~TickQueue.in_sync` is true, its last ticks
are the ledger's.  The leader says what happened (a sync loaded, a claim
sent, its reply answered, a call whose outcome is unknown) and the queue
decides; out of sync, the leader syncs again before it fires.

Batches are planned here, bounded in size: on-time ticks first, then the
backlog oldest first, so a long outage's catch-up never delays the ticks
falling due now by more than a batch.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dramatiq import Message

from ..schedules.outcome import Outcome
from ..schedules.planner import ON_TIME_MS, Decision, message_for, plan
from ..schedules.schedule import BoundSchedule
from ..store.boundary import Payload
from ..store.codes import ClaimResult
from ..store.ledger import Claim

__all__ = ["Planned", "TickQueue"]

#: Firing decisions one backlogged schedule contributes to a batch before
#: the next-oldest schedule gets its turn.
BACKLOG_CHUNK = 32

#: Messages are built ahead for ticks due within this long.
AHEAD_MS = 60_000

#: Building ahead stops this long before the next tick falls due (the
#: rest is built after that tick's turn, or on the fire path): a large
#: burst's messages never delay the next tick.
BUILD_MARGIN_MS = 20

#: Messages built between two looks at the clock.
_BUILD_STEP = 64

#: A heap entry: ``(next tick, push number, schedule id)``.
_Entry = tuple[int, int, str]


@dataclasses.dataclass
class Planned:
    """One claim of a batch, with what is needed to act on its result."""

    schedule: BoundSchedule
    claim: Claim
    message: Message[Any] | None = None
    #: The message encoded for the broker, when it was built ahead.
    payload: Payload | None = None


class TickQueue:
    """What the leader fires next, kept in step with the ledger.

    Parameters:
      schedules: The schedules by id.
      prefix: The key prefix (part of every deterministic message id).
      encode: Encodes a message for the broker ahead of its tick (the
        RedisBroker boundaries), so that the fire path only runs hooks.
        Defaults to None: nothing is encoded ahead.
      now_ms: The scheduler's clock (Redis time), read while building ahead
        so that building stops before the next tick falls due.  Defaults
        to None: building ahead never stops early.
    """

    def __init__(
        self,
        schedules: Mapping[str, BoundSchedule],
        *,
        prefix: str,
        encode: Callable[[BoundSchedule, Message[Any], int], Payload] | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.schedules: dict[str, BoundSchedule] = dict(schedules)
        self.prefix = prefix
        self._encode = encode
        self._now_ms = now_ms
        self._in_sync = False
        # The batch whose claim was sent and whose reply is awaited.
        self._in_flight: list[Planned] | None = None
        self._last: dict[str, int] = {}
        # Each schedule's one live entry ``(next tick, push number, id)``.
        # Every push makes a new entry with a new number, and an entry in the
        # heap or backlog is live only while it is the schedule's entry here:
        # staleness is never decided by comparing ticks (a schedule put back
        # at the tick it already had would otherwise be live twice).
        self._head: dict[str, _Entry] = {}
        self._pushes = 0
        self._heap: list[_Entry] = []
        self._backlog: list[_Entry] = []
        self._ahead: dict[str, tuple[int, Message[Any], Payload | None]] = {}
        # Schedules put back since the last build_ahead(): their next
        # messages are built when the leader has nothing due.
        self._to_build: list[str] = []
        # A load's schedules in the sync's order, with their next tick (None
        # until walked), and those whose next tick needs a walk (end_load).
        self._loading: dict[str, int | None] = {}
        self._unwalked: list[tuple[int, str]] = []

    # -- the ledger's view ----------------------------------------------------

    @property
    def in_sync(self) -> bool:
        """Whether the last ticks are the ledger's (fire only then)."""
        return self._in_sync

    def begin_load(self) -> None:
        """Start taking a sync's ticks in parts (out of sync until
        :meth:`end_load`)."""
        self._forget_ticks()

    def load_part(self, last: Iterable[tuple[str, int]]) -> None:
        """Take some of a sync's ``(schedule id, last tick)`` pairs.  Next
        ticks that need a walk of a cron expression wait for
        :meth:`end_load`."""
        schedules = self.schedules
        loading = self._loading
        for sid, tick in last:
            schedule = schedules.get(sid)
            if schedule is not None:
                self._last[sid] = tick
                head = loading[sid] = schedule.cadence.next_after_if_known(tick)
                if head is None:
                    self._unwalked.append((tick, sid))

    def end_load(self) -> None:
        """Every schedule's tick is in: the queue is in sync."""
        # Oldest entry first: schedules sharing an expression and zone then
        # share one walk to their next tick (see Cadence.next_after).
        loading, self._loading = self._loading, {}
        unwalked, self._unwalked = self._unwalked, []
        unwalked.sort()
        for tick, sid in unwalked:
            loading[sid] = self.schedules[sid].cadence.next_after(tick)
        # Pushed in the sync's order, whichever next ticks this process had
        # walked before: ties between equal next ticks go by push order, and
        # the batches must not depend on a process-wide cache.
        for sid, head in loading.items():
            if head is not None:
                self._push(sid, head)
        self._in_sync = True

    def invalidate(self) -> None:
        """The ledger may have moved without us: sync before firing again."""
        self._in_sync = False
        self._in_flight = None

    def sent(self, batch: list[Planned]) -> None:
        """A claim of ``batch`` went to the ledger: until :meth:`decided`
        gets its reply, the ledger may have moved without us."""
        self._in_flight = batch if self._in_sync else None
        self._in_sync = False

    def last(self, schedule_id: str) -> int | None:
        """The last decided tick of a schedule, as far as the queue knows."""
        return self._last.get(schedule_id)

    # -- schedules that come and go -------------------------------------------

    def put(self, schedule: BoundSchedule, last: int | None = None) -> None:
        """Add or replace a schedule; ``last`` is its ledger entry if known
        (otherwise the queue is out of sync until the next sync)."""
        self.schedules[schedule.id] = schedule
        self._ahead.pop(schedule.id, None)
        if last is None:
            self._last.pop(schedule.id, None)
            self._head.pop(schedule.id, None)
            self.invalidate()
            return
        self._last[schedule.id] = last
        self._push(schedule.id, schedule.cadence.next_after(last))

    def replace_all(self, schedules: Mapping[str, BoundSchedule]) -> None:
        """Take a new set of schedules; out of sync until the next sync
        (which reads every last tick again: the old ones are dropped now, so
        that two large sets never live side by side)."""
        self.schedules = dict(schedules)
        self._ahead = {sid: m for sid, m in self._ahead.items() if sid in self.schedules}
        self._to_build = []
        self._forget_ticks()

    def _forget_ticks(self) -> None:
        """Out of sync, with no last or next tick known: a sync fills them."""
        self.invalidate()
        self._last = {}
        self._head = {}
        self._heap = []
        self._backlog = []
        self._loading = {}
        self._unwalked = []

    def discard(self, schedule_id: str) -> None:
        """Forget a schedule (its heap entry is dropped lazily)."""
        self.schedules.pop(schedule_id, None)
        self._last.pop(schedule_id, None)
        self._head.pop(schedule_id, None)
        self._ahead.pop(schedule_id, None)

    # -- planning batches -----------------------------------------------------

    def next_due_ms(self) -> int | None:
        """When the earliest tick falls due (None when nothing ever will)."""
        self._drop_stale(self._backlog)
        self._drop_stale(self._heap)
        heads = [heap[0][0] for heap in (self._backlog, self._heap) if heap]
        return min(heads) if heads else None

    def take(self, now: int, limit: int) -> list[Planned]:
        """Plan the next batch of at most about ``limit`` claims due at
        ``now``: on-time ticks first, then the backlog, oldest first.
        ``now`` is the scheduler's clock (Redis time,
        :meth:`.ServerClock.now_ms`), which also stamps the messages not
        built ahead: dramatiq's ``AgeLimit`` on the consumers counts from
        the stamp, so it must be the clock they share, never this host's
        wall clock.

        The planned schedules leave the queue until :meth:`decided` puts
        them back; if the batch's fate stays unknown, :meth:`invalidate`
        and a sync restore everything.
        """
        on_time: list[_Entry] = []
        heap = self._heap
        while heap and heap[0][0] <= now and len(on_time) < limit:
            entry = heapq.heappop(heap)
            if self._head.get(entry[2]) != entry:
                continue  # stale entry of a replaced or removed schedule
            if now - entry[0] < ON_TIME_MS:
                on_time.append(entry)
            else:
                heapq.heappush(self._backlog, entry)
        out: list[Planned] = []
        for entry in on_time:
            self._plan_into(out, entry, now, 1)
        backlog = self._backlog
        while backlog and len(out) < limit:
            entry = heapq.heappop(backlog)
            if self._head.get(entry[2]) != entry:
                continue
            self._plan_into(out, entry, now, min(BACKLOG_CHUNK, limit - len(out)))
        return out

    def _plan_into(self, out: list[Planned], entry: _Entry, now: int, limit: int) -> None:
        head, _, sid = entry
        schedule = self.schedules[sid]
        del self._head[sid]  # out of the queue until decided() puts it back
        if 0 <= now - head < ON_TIME_MS:
            # On time, the common case (see plan()): one firing decision.
            out.append(self._planned(schedule, Decision(head, Outcome.FIRED, True, str(now - head)), now))
            return
        decisions = plan(schedule, self._last[sid], now, head=head, limit=limit)
        for decision in decisions:
            out.append(self._planned(schedule, decision, now))

    def _planned(self, schedule: BoundSchedule, decision: Decision, now: int) -> Planned:
        message: Message[Any] | None = None
        payload: Payload | None = None
        message_id = ""
        if decision.fire:
            message, payload = self._message(schedule, decision.tick_ms, now)
            message_id = message.message_id
        claim = Claim(
            schedule_id=schedule.id,
            tick_ms=decision.tick_ms,
            outcome=decision.outcome,
            fire=decision.fire,
            actor_name=schedule.actor_name,
            detail=decision.detail,
            message_id=message_id,
            overlap_ttl_ms=schedule.overlap_ttl if schedule.overlap == "skip" else 0,
            revision=schedule.revision,
        )
        return Planned(schedule=schedule, claim=claim, message=message, payload=payload)

    def _message(self, schedule: BoundSchedule, tick: int, now: int) -> tuple[Message[Any], Payload | None]:
        """The message for a tick (and its encoding), from the one built
        ahead of time if any; else built now, stamped ``now`` (the batch's
        instant) by the scheduler's clock (dramatiq's AgeLimit counts from
        the timestamp: a caught-up tick is fresh)."""
        cached = self._ahead.pop(schedule.id, None)
        if cached is not None and cached[0] == tick:
            return cached[1], cached[2]
        return message_for(schedule, tick, prefix=self.prefix, timestamp_ms=now), None

    # -- results --------------------------------------------------------------

    def decided(self, batch: list[Planned], results: Iterable[ClaimResult], now: int) -> None:
        """Apply the ledger's answers to a planned batch and put its
        schedules back at their next ticks.  The queue may have let go of
        the batch's schedules meanwhile (a lost reply settled after a
        step-down, a reload of the runtime schedules): what it no longer
        knows, the next sync reads from the ledger.  The reply to the claim
        :meth:`sent` last restores the sync, unless it says otherwise."""
        if batch is self._in_flight:
            self._in_flight = None
            self._in_sync = True
        touched: dict[str, BoundSchedule] = {}
        for item, result in zip(batch, results, strict=True):
            sid = item.schedule.id
            if sid not in self.schedules:
                continue
            touched[sid] = item.schedule
            if result in (ClaimResult.REFUSED, ClaimResult.LOST):
                # Someone else decided this tick, or the entry is gone: our
                # picture is stale.
                self._in_sync = False
            elif result == ClaimResult.GONE:
                # The runtime definition was removed or replaced: forget this
                # copy (the change feed brings the new one, if any).
                self.discard(sid)
                touched.pop(sid, None)
                continue
            elif result != ClaimResult.NOT_YET and sid in self._last:
                self._last[sid] = max(self._last[sid], item.claim.tick_ms)
        for sid in touched:
            if sid in self._last and sid in self.schedules:
                # The current definition: it may have been replaced while
                # this batch was in flight.
                self._reschedule(self.schedules[sid], now)

    def _reschedule(self, schedule: BoundSchedule, now: int) -> None:
        """Put a schedule back at its next undecided tick; its message is
        built ahead later (:meth:`build_ahead`), off the fire path, so a burst
        of batches is claimed back to back."""
        sid = schedule.id
        self._push(sid, schedule.cadence.next_after(self._last[sid]))
        self._to_build.append(sid)

    def build_ahead(self, now: int) -> None:
        """Build (and encode) the messages of the ticks that fall due soon,
        for the schedules put back since the last call.  Only what falls due
        within :data:`AHEAD_MS`: with a large runtime set spread over a day,
        messages for all of them would cost far more memory than the
        schedules themselves.  Stops :data:`BUILD_MARGIN_MS` before the
        next tick falls due; the rest waits for the next call."""
        pending, self._to_build = self._to_build, []
        due = self.next_due_ms()
        clock = self._now_ms
        stop = None if due is None or clock is None else due - BUILD_MARGIN_MS
        for n, sid in enumerate(pending):
            if stop is not None and clock is not None and n % _BUILD_STEP == 0 and clock() >= stop:
                self._to_build = pending[n:]
                return
            schedule = self.schedules.get(sid)
            entry = self._head.get(sid)
            head = entry[0] if entry is not None else None
            if schedule is None or head is None or not now < head <= now + AHEAD_MS or sid in self._ahead:
                continue
            # Stamped with its tick: the message is as old as its tick.
            message = message_for(schedule, head, prefix=self.prefix, timestamp_ms=head)
            payload = self._encode(schedule, message, head) if self._encode is not None else None
            self._ahead[sid] = (head, message, payload)

    def _push(self, sid: str, head: int) -> None:
        """Make ``head`` the schedule's next tick; any earlier entry of it
        is stale from now on."""
        self._pushes += 1
        entry = (head, self._pushes, sid)
        self._head[sid] = entry
        heapq.heappush(self._heap, entry)

    def _drop_stale(self, heap: list[_Entry]) -> None:
        while heap and self._head.get(heap[0][2]) != heap[0]:
            heapq.heappop(heap)
