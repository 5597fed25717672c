"""Test your own cron actors without Redis and without waiting for the clock.

With a ``StubBroker`` carrying a :class:`~dramatiq_cron_middleware.CronMiddleware`
and your actors declared on it, :class:`CronSimulator` plays the leader on a
fake clock::

    simulator = CronSimulator(broker, now=datetime(2030, 1, 1, tzinfo=timezone.utc))
    messages = simulator.advance(by=timedelta(hours=1))   # enqueued into the broker
    broker.join("default")
    worker.join()

It decides ticks with the leader's own code (``planner.plan``), so the
messages carry the same ``cron_tick`` option, arguments, options and
deterministic message ids a real leader would send, and a leaderless gap
(``advance(..., leading=False)``) is caught up by the schedules' catch-up
policy.  Runtime schedules added while it is attached (``cron.add``,
``cron.remove``, ``cron.list_runtime``, ``cron.runtime``) are kept in
memory and fire like declared ones, from the fake time of their ``add``.
What lives only in Redis is not simulated: pausing, and ``overlap="skip"``
(every tick of such a schedule fires).
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import heapq
from collections.abc import Callable, Iterable
from typing import Any

from dramatiq import Broker, Message
from dramatiq.logging import get_logger

from .errors import CronScheduleError
from .middleware import CronMiddleware, find_middleware
from .schedules.planner import due_decisions, jitter_ms, message_for
from .schedules.schedule import BoundSchedule, Schedule
from .store.runtime import RuntimePage, RuntimeSchedule, RuntimeSchedules, _schedule_id

__all__ = ["CronSimulator", "Instant", "SimulatedRuntime", "cron_middleware_of", "ticks_between"]

#: A point in time: a timezone-aware ``datetime``, or epoch milliseconds.
Instant = dt.datetime | int


def cron_middleware_of(broker: Broker) -> CronMiddleware:
    """The :class:`CronMiddleware` added to ``broker`` (see
    :func:`~dramatiq_cron_middleware.find_middleware`)."""
    return find_middleware(broker)


def ticks_between(broker: Broker, start: Instant, end: Instant) -> list[Message[Any]]:
    """The messages the broker's schedules would enqueue for every tick
    ``t`` with ``start < t <= end``, each on time, ordered by tick (then by
    declaration order).  Nothing is enqueued."""
    middleware = cron_middleware_of(broker)
    start_ms, end_ms = _ms(start, "start"), _ms(end, "end")
    found: list[tuple[int, int, Message[Any]]] = []
    for order, schedule in enumerate(middleware.all_schedules()):
        for tick in schedule.ticks_between(start_ms, end_ms):
            found.append((tick, order, message_for(schedule, tick, prefix=middleware.prefix)))
    found.sort(key=lambda item: (item[0], item[1]))
    return [message for _, _, message in found]


class CronSimulator:
    """Plays the cron leader for a broker's schedules on a fake clock,
    enqueueing what a real leader would, with no Redis and no waiting.

    Attaching it marks the broker's :class:`CronMiddleware` as simulated, so
    workers started on the broker start no leader thread and need no Redis
    configured.  Every schedule starts with ``now`` as its last decided
    tick, as a fresh ledger does.

    Parameters:
      broker: A broker (typically a ``StubBroker``) with a ``CronMiddleware``
        and the cron actors already declared.
      now: Where the fake clock starts: an aware ``datetime`` or epoch ms.
    """

    def __init__(self, broker: Broker, *, now: Instant) -> None:
        self.broker = broker
        self.middleware = cron_middleware_of(broker)
        self._now = _ms(now, "now")
        #: The runtime schedules of the simulation, in memory; the
        #: middleware's runtime calls come here while it is attached.
        self.runtime = SimulatedRuntime(self.middleware, broker, clock=lambda: self._now)
        self.middleware.attach_simulator(self)
        self._declared = {s.id: s for s in self.middleware.all_schedules()}
        self._schedules = dict(self._declared)
        self._last = {sid: self._now for sid in self._schedules}
        #: Every message enqueued so far, in order.
        self.enqueued: list[Message[Any]] = []
        #: ``(schedule id, tick ms)`` of every tick recorded as missed (by the
        #: catch-up policy or window); for a run of missed ticks, the last one.
        self.missed: list[tuple[str, int]] = []

    @property
    def now(self) -> dt.datetime:
        """The fake clock, in UTC."""
        return dt.datetime.fromtimestamp(self._now / 1000, tz=dt.timezone.utc)

    @property
    def now_ms(self) -> int:
        """The fake clock, in epoch milliseconds."""
        return self._now

    def advance(
        self, *, to: Instant | None = None, by: dt.timedelta | int | None = None, leading: bool = True
    ) -> list[Message[Any]]:
        """Move the fake clock forward and enqueue what falls due.

        With ``leading=True`` (the default) a leader runs the whole time:
        ticks left over from a leaderless stretch are first decided at once
        by the catch-up policy, then every tick up to the new time fires on
        time, in order.  With ``leading=False`` nobody leads: time passes,
        nothing is enqueued, and the next leading ``advance`` catches up.

        Parameters:
          to: The new time (an aware datetime or epoch ms).
          by: Or how far to move: a ``timedelta`` or milliseconds.
          leading: Whether a leader runs during the interval.

        Returns the messages enqueued by this call, in enqueue order.
        """
        if (to is None) == (by is None):
            raise ValueError("advance() takes exactly one of to= or by=")
        if by is not None:
            step = int(by.total_seconds() * 1000) if isinstance(by, dt.timedelta) else by
            target = self._now + step
        else:
            assert to is not None
            target = _ms(to, "to")
        if target < self._now:
            raise ValueError("the simulated clock cannot go backwards")
        if not leading:
            self._now = target
            return []
        self._follow_runtime()
        sent: list[Message[Any]] = []
        # A leader decides at once when it takes over, then wakes at each tick.
        sent += self._decide_at(self._now, list(self._schedules))
        heap = [(s.next_after(self._last[sid]), sid) for sid, s in self._schedules.items()]
        heapq.heapify(heap)
        while heap and heap[0][0] <= target:
            at = heap[0][0]
            due: list[str] = []
            while heap and heap[0][0] == at:
                due.append(heapq.heappop(heap)[1])
            self._now = at
            sent += self._decide_at(at, due)
            for sid in due:
                heapq.heappush(heap, (self._schedules[sid].next_after(self._last[sid]), sid))
        self._now = target
        return sent

    def _follow_runtime(self) -> None:
        """Take in the runtime schedules as they are now: a new or replaced
        one starts from the fake time it was written (as ``add`` writes its
        baseline), a removed one fires no more."""
        current = self.runtime.schedules()
        for sid in [sid for sid in self._schedules if sid not in self._declared and sid not in current]:
            del self._schedules[sid], self._last[sid]
        for sid, stored in current.items():
            known = self._schedules.get(sid)
            if known is None or known.revision != stored.revision:
                self._schedules[sid] = stored.schedule
                self._last[sid] = stored.updated_ms

    def _decide_at(self, now: int, schedule_ids: list[str]) -> list[Message[Any]]:
        sent: list[Message[Any]] = []
        for sid in schedule_ids:
            schedule = self._schedules[sid]
            for decision in due_decisions(schedule, self._last[sid], now):
                self._last[sid] = max(self._last[sid], decision.tick_ms)
                if not decision.fire:
                    self.missed.append((sid, decision.tick_ms))
                    continue
                message = message_for(schedule, decision.tick_ms, prefix=self.middleware.prefix)
                self._enqueue(schedule, message)
                sent.append(message)
        return sent

    def _enqueue(self, schedule: BoundSchedule, message: Message[Any]) -> None:
        # The same jitter delay the leader would apply, so a test sees it.
        delay = jitter_ms(schedule, message.message_id)
        self.broker.enqueue(message, delay=delay or None)
        self.enqueued.append(message)

    def close(self) -> None:
        """Detach from the middleware: workers start leader threads again."""
        self.middleware.attach_simulator(None)


class SimulatedRuntime(RuntimeSchedules):
    """The runtime schedules of a :class:`CronSimulator`, in memory: the
    calls an app makes (``add``, ``add_many``, ``remove``, ``get``,
    ``list``, ``count_by_actor``), checked by the same rules as the Redis
    store, with the simulator's fake clock.  What only a leader reads
    (``version``, ``changes_since``, ``load_all``) is not available.

    Parameters:
      middleware: The broker's :class:`CronMiddleware` (its defaults apply).
      broker: The broker whose actors runtime schedules name.
      clock: The fake time, in epoch ms.
    """

    def __init__(self, middleware: CronMiddleware, broker: Broker, *, clock: Callable[[], int]) -> None:
        # Not RuntimeSchedules.__init__: nothing here talks to Redis, so the
        # client and its scripts are never set up; only the checks are shared.
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.resolve_actor = lambda actor: middleware._runtime_actor(broker, actor)
        self.timezone = middleware.timezone
        self.catch_up = middleware.catch_up
        self.catch_up_window = middleware.catch_up_window
        self._clock = clock
        self._stored: dict[str, RuntimeSchedule] = {}
        self._revision = 0

    def schedules(self) -> dict[str, RuntimeSchedule]:
        """Every stored runtime schedule by id."""
        return dict(self._stored)

    def add_many(self, items: Iterable[tuple[object, str | Schedule, str]]) -> builtins.list[RuntimeSchedule]:
        """As :meth:`RuntimeSchedules.add_many`, in memory."""
        prepared = [self._prepare(actor, schedule, name) for actor, schedule, name in items]
        now = self._clock()
        out = []
        for bound, _ in prepared:
            self._revision += 1
            before = self._stored.get(bound.id)
            stored = RuntimeSchedule(
                schedule=dataclasses.replace(bound, revision=self._revision),
                created_ms=now if before is None else before.created_ms,
                updated_ms=now,
                as_of_ms=now,
            )
            self._stored[bound.id] = stored
            out.append(stored)
        return out

    def remove(self, actor: object, name: str) -> bool:
        """As :meth:`RuntimeSchedules.remove`, in memory."""
        return self._stored.pop(_schedule_id(actor, name), None) is not None

    def get(self, actor: object, name: str) -> RuntimeSchedule | None:
        """As :meth:`RuntimeSchedules.get`, in memory."""
        found = self._stored.get(_schedule_id(actor, name))
        return None if found is None else dataclasses.replace(found, as_of_ms=self._clock())

    def list(
        self,
        *,
        actor: object | None = None,
        search: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> RuntimePage:
        """As :meth:`RuntimeSchedules.list`, in memory."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise CronScheduleError(f"runtime schedules: limit must be an int from 1 to 10000, got {limit!r}")
        owner = None if actor is None else getattr(actor, "actor_name", actor)
        ids = sorted(i for i in self._stored if owner is None or i.partition(":")[0] == owner)
        total = None if search is not None else len(ids)
        ids = [i for i in ids if (search is None or search.lower() in i.lower()) and (cursor is None or i > cursor)]
        page = ids[:limit]
        now = self._clock()
        items = [dataclasses.replace(self._stored[i], as_of_ms=now) for i in page]
        return RuntimePage(items=items, cursor=page[-1] if len(ids) > limit else None, total=total)

    def count_by_actor(self) -> dict[str, int]:
        """As :meth:`RuntimeSchedules.count_by_actor`, in memory."""
        out: dict[str, int] = {}
        for sid in sorted(self._stored):
            actor = sid.partition(":")[0]
            out[actor] = out.get(actor, 0) + 1
        return out


def _ms(value: Instant, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an aware datetime or epoch ms, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{what} must be timezone-aware (got the naive {value.isoformat()})")
        return int(value.timestamp() * 1000)
    raise TypeError(f"{what} must be an aware datetime or epoch ms, got {type(value).__name__}")
