"""Granted ticks whose enqueue has not succeeded yet.

A tick the ledger granted belongs to this process alone (the ledger refuses
it to everyone else), so a failed enqueue is retried here with the same
message, backing off, until it succeeds or falls out of the schedule's
catch-up window.  Failures are tracked per schedule: one WARNING when a
schedule starts failing and one when it works again, however many ticks
and retries lie between.

Removal is final for owed ticks too: before each retry, the owed ticks of
runtime schedules are checked against the stored revisions (one script
call), and those of a definition removed or replaced since their claim are
dropped, recorded in the history, and reported in one WARNING.  (A removal
that lands between that check and the push is not seen: the same window
as between a claim and its enqueue.)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from dramatiq import Message

from ..schedules.planner import jitter_ms
from ..schedules.schedule import BoundSchedule
from ..store.boundary import BrokerBoundary
from ..store.connection import redact
from .reports import names_of

__all__ = ["Owed", "OwedQueue"]

#: Longest pause between two attempts at one tick, seconds.
MAX_BACKOFF = 5.0


@dataclasses.dataclass(eq=False)
class Owed:
    """A granted tick and its message (compared by identity)."""

    schedule: BoundSchedule
    tick_ms: int
    message: Message[Any]
    next_try: float = 0.0
    attempts: int = 0


class OwedQueue:
    """Enqueues granted ticks and retries the ones that fail.

    Parameters:
      boundary: How messages reach the broker.
      logger: Where per-schedule state changes are reported.
      now_ms: The scheduler's clock (server time), for lag, give-up and
        the eta of a jittered message.
      monotonic: The monotonic clock, for back-off.
      enqueued: Called with ``(schedule id, tick ms, lag ms)`` for each
        message that reached the broker.
      drop_stale: Given owed runtime ticks ``(schedule, tick ms, message
        id)``, which to drop because their definition was removed or
        replaced (it records them); see
        :meth:`~.runtime.RuntimeSchedules.drop_stale`.  Defaults to None:
        no runtime schedules.
    """

    def __init__(
        self,
        *,
        boundary: BrokerBoundary,
        logger: logging.Logger,
        now_ms: Callable[[], int],
        monotonic: Callable[[], float] = time.monotonic,
        enqueued: Callable[[str, int, int], None] | None = None,
        drop_stale: Callable[[Sequence[tuple[BoundSchedule, int, str]]], list[bool]] | None = None,
    ) -> None:
        self.boundary = boundary
        self.logger = logger
        self._now_ms = now_ms
        self._monotonic = monotonic
        self._enqueued = enqueued
        self._drop_stale = drop_stale
        self._owed: list[Owed] = []
        #: Schedules whose last enqueue failed.
        self.failing: set[str] = set()

    def __len__(self) -> int:
        return len(self._owed)

    def next_try(self) -> float | None:
        """The monotonic instant of the next retry, if any is owed."""
        return min((o.next_try for o in self._owed), default=None)

    def send(self, items: Sequence[Owed], *, recheck: bool = False) -> None:
        """Enqueue granted ticks (all together: one pipelined round trip for
        a RedisBroker); failures stay owed.  With ``recheck`` (ticks of a
        claim whose lost reply was settled later), the ticks of a runtime
        definition removed or replaced since are dropped first, as before
        a retry."""
        if not items:
            return
        if recheck:
            for item in items:  # owed until sent (or dropped, or retried if the check fails)
                if item not in self._owed:
                    self._owed.append(item)
            items = self._current(list(items))
            if not items:
                return
        for item in items:
            item.attempts += 1
        failures = self.boundary.send(
            [(o.message, jitter_ms(o.schedule, o.message.message_id) or None) for o in items],
            now_ms=self._now_ms(),  # a jittered message's eta: the consumers' shared clock
        )
        self.settled(items, failures)

    def settled(self, items: Sequence[Owed], failures: Sequence[BaseException | None]) -> None:
        """Record what became of granted ticks: None for one that reached the
        broker (here or inside the claim), else the exception; failures stay
        owed."""
        started: dict[str, str] = {}
        recovered: list[str] = []
        now_mono = self._monotonic()
        now_ms = self._now_ms() if self._enqueued is not None and items else 0
        for item, exc in zip(items, failures, strict=True):
            sid = item.schedule.id
            if exc is None:
                if sid in self.failing:
                    self.failing.discard(sid)
                    recovered.append(sid)
                if item in self._owed:
                    self._owed.remove(item)
                if self._enqueued is not None:
                    self._enqueued(sid, item.tick_ms, now_ms - item.tick_ms)
                continue
            if sid not in self.failing:
                self.failing.add(sid)
                started[sid] = redact(f"{type(exc).__name__}: {exc}")
            item.next_try = now_mono + min(0.1 * 2**item.attempts, MAX_BACKOFF)
            if item not in self._owed:
                self._owed.append(item)
        if started:
            reasons = sorted(set(started.values()))
            self.logger.warning(
                "Enqueueing fails for %s (%s); their granted ticks are retried with the same message ids.",
                names_of(started),
                "; ".join(reasons[:3]),
            )
        if recovered:
            self.logger.warning("Enqueueing works again for %s.", names_of(recovered))

    def pay(self) -> None:
        """Retry the owed ticks whose back-off has passed; give up on those
        older than their schedule's catch-up window."""
        if not self._owed:
            return
        now_mono = self._monotonic()
        due = [o for o in self._owed if o.next_try <= now_mono]
        if not due:
            return
        now = self._now_ms()
        expired = [o for o in due if now - o.tick_ms > max(o.schedule.catch_up_window, 1000)]
        for item in expired:
            self._owed.remove(item)
        if expired:
            self.logger.warning(
                "Gave up enqueueing %d granted tick(s) of %s: older than the catch-up window.",
                len(expired),
                names_of([o.schedule.id for o in expired]),
            )
        self.send(self._current([o for o in due if o not in expired]))

    def _current(self, due: list[Owed]) -> list[Owed]:
        """The owed ticks still to send: those of a removed or replaced
        runtime definition are dropped; while their check cannot be made
        (Redis does not answer), runtime ticks wait for the next retry."""
        runtime = [o for o in due if o.schedule.source == "runtime"]
        if not runtime or self._drop_stale is None:
            return due
        try:
            stale = self._drop_stale([(o.schedule, o.tick_ms, o.message.message_id) for o in runtime])
        except Exception:  # the scheduler's Redis is down: the leader reports that; retried later
            now_mono = self._monotonic()
            for item in runtime:
                item.attempts += 1
                item.next_try = now_mono + min(0.1 * 2**item.attempts, MAX_BACKOFF)
            return [o for o in due if o.schedule.source != "runtime"]
        dropped = [o for o, gone in zip(runtime, stale, strict=True) if gone]
        for item in dropped:
            self._owed.remove(item)
        if dropped:
            ids = [o.schedule.id for o in dropped]
            self.failing.difference_update(ids)
            self.logger.warning(
                "Dropped %d granted tick(s) of %s before their enqueue succeeded: the runtime definition was "
                "removed or replaced since (recorded in the history as dropped).",
                len(dropped),
                names_of(ids),
            )
        return [o for o in due if o not in dropped]

    def pay_quietly(self) -> None:
        """``pay``, for the paths where the broker may be down as well."""
        try:
            self.pay()
        except Exception:  # retried later
            pass
