"""Test your own cron actors without Redis and without waiting for the clock.

With a ``StubBroker`` carrying a :class:`~dramatiq_cron_middleware.CronMiddleware`
and your actors declared on it, :class:`CronSimulator` plays the leader on a
fake clock::

    simulator = CronSimulator(broker, now=datetime(2030, 1, 1, tzinfo=timezone.utc))
    messages = simulator.advance(by=timedelta(hours=1))   # enqueued into the broker
    broker.join("default")
    worker.join()

It runs the real leader (its tick queue, planner, claim rules and owed
queue) on the in-memory store, turned by hand on the fake clock, so the
messages carry the same ``cron_tick`` option, arguments, options and
deterministic message ids a real leader would send, and a leaderless gap
(``advance(..., leading=False)``) is caught up by the schedules' catch-up
policy.  Runtime schedules added while it is attached (``cron.add``,
``cron.remove``, ``cron.list``, ``cron.runtime``) are written to
that store and fire like declared ones, from the fake time of their
``add``; a replacement or removal takes effect as on Redis.  No thread is
started and no Redis is needed.  ``overlap="skip"`` is not simulated (no
worker reports a finished message back: every tick of such a schedule
fires).

Run monitoring is simulated too: workers on the broker record each cron
message's run in the simulator's store (on the fake clock), the simulated
leader decides every schedule's health from them, so ``simulator.runs(id)``,
``simulator.health()`` and ``simulator.alerts`` show what ``dramatiq-cron
runs``, ``check`` and ``on_alert`` would, for testing thresholds::

    simulator.advance(by=timedelta(minutes=2))   # the worker is not running
    assert simulator.health()["report"] == "late"
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dramatiq import Broker, Message, Worker
from dramatiq.logging import get_logger
from dramatiq.worker import ConsumerThread, WorkerThread

from .errors import CronScheduleError
from .leader.thread import LeaderThread
from .middleware import CronMiddleware, find_middleware
from .monitoring.health import Facts, Policy
from .monitoring.monitor import HealthMonitor
from .monitoring.read import decide_check
from .monitoring.records import Alert, RunRecord, parse_run
from .monitoring.thread import HealthObserver
from .schedules.outcome import Outcome
from .schedules.planner import message_for
from .schedules.schedule import BoundSchedule
from .store.boundary import Boundary, BrokerBoundary
from .store.clock import ServerClock
from .store.codes import whole_actor
from .store.in_memory import InMemoryStore, MemoryRuns, MemoryServer
from .store.keys import Keys
from .store.runtime import RuntimePage, RuntimeSchedule, RuntimeSchedules, _schedule_id, already_exists

__all__ = ["CronSimulator", "Instant", "SimulatedRuntime", "cron_middleware_of", "running_worker", "ticks_between"]

#: A point in time: a timezone-aware ``datetime``, or epoch milliseconds.
Instant = dt.datetime | int


@contextlib.contextmanager
def running_worker(
    broker: Broker, *, start_timeout: int = 30_000, stop_timeout: int = 30_000, **worker_kwargs: Any
) -> Iterator[Worker]:
    """Start a ``dramatiq.Worker`` on ``broker``, wait until every one of
    its threads runs, yield it, and stop it (also when the body or the
    start raised)::

        with running_worker(broker, worker_timeout=50) as worker:
            job.send()
            broker.join(job.queue_name)
            worker.join()

    dramatiq's worker and consumer threads set their ``running`` flag as
    the first line of their own ``run``, while ``Worker.stop`` clears it: a
    stop that lands after ``Worker.start`` returned but before a thread got
    to that line is lost, and the thread loops forever (``Worker.stop`` then
    waits its whole timeout, ten minutes by default, and the thread stays).
    A loaded machine, or DEBUG logging, makes that likely for a test that
    stops a worker right after starting it.  So the stop comes only once
    every thread runs.  The worker's own middleware is taken off the broker
    afterwards, so a queue declared later starts no consumer for it.

    Parameters:
      broker: The broker (a ``StubBroker`` or a real one).
      start_timeout: How long in milliseconds to wait for the threads to
        run (30 s by default); then :class:`TimeoutError`, after the stop.
      stop_timeout: Passed to ``Worker.stop`` (30 s by default).
      worker_kwargs: Passed to ``dramatiq.Worker`` (``worker_threads``,
        ``worker_timeout``, ``queues``).
    """
    worker = Worker(broker, **worker_kwargs)
    running = False
    try:
        worker.start()
        running = _all_threads_run(worker, start_timeout)
        if not running:
            raise TimeoutError(f"dramatiq's worker threads did not start running within {start_timeout} ms")
        yield worker
    finally:
        if not running:
            _all_threads_run(worker, start_timeout)
        worker.stop(timeout=stop_timeout)
        broker.middleware[:] = [m for m in broker.middleware if getattr(m, "worker", None) is not worker]


def _all_threads_run(worker: Worker, timeout_ms: int) -> bool:
    """Wait up to ``timeout_ms`` until every live thread of ``worker`` (its
    worker threads and consumers) has set ``running``; whether they did."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        threads: list[WorkerThread | ConsumerThread] = [*worker.workers, *worker.consumers.values()]
        if all(thread.running or not thread.is_alive() for thread in threads):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


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

    It runs the leader's own code (the tick queue, the planner, the claim
    rules and the owed queue) on the in-memory store
    (:class:`~.store.in_memory.MemoryServer`), turning it by hand: no
    thread is started.  Attaching it marks the broker's
    :class:`CronMiddleware` as simulated, so workers started on the broker
    start no leader thread and need no Redis configured.  Every schedule
    starts with ``now`` as its last decided tick, as a fresh ledger does.

    Parameters:
      broker: A broker (typically a ``StubBroker``) with a ``CronMiddleware``
        and the cron actors already declared.
      now: Where the fake clock starts: an aware ``datetime`` or epoch ms.
    """

    def __init__(self, broker: Broker, *, now: Instant) -> None:
        self.broker = broker
        self.middleware = cron_middleware_of(broker)
        self._now = _ms(now, "now")
        #: The store the simulated leader runs on (Redis, in memory): pause a
        #: schedule with ``server.paused.add(schedule_id)``.
        self.server = MemoryServer(now_ms=lambda: self._now)
        #: The runtime schedules of the simulation, in memory; the
        #: middleware's runtime calls come here while it is attached.
        self.runtime = SimulatedRuntime(self.middleware, broker, clock=lambda: self._now, server=self.server)
        self.middleware.attach_simulator(self)
        #: Every message enqueued so far, in order.
        self.enqueued: list[Message[Any]] = []
        self._sent: list[Message[Any]] = []
        self._errors = _Errors()
        self._history = 0
        #: ``(schedule id, tick ms)`` of every tick recorded as missed (by the
        #: catch-up policy or window); for a run of missed ticks, the last one.
        self.missed: list[tuple[str, int]] = []
        #: Run monitoring in the simulation's store: workers record runs here.
        self.run_store = MemoryRuns(self.server, run_history=self.middleware.monitor_config.run_history)
        self._monitor = HealthMonitor(store=self.run_store, schedule=self._describe)
        #: Every alert the simulated leader sent, in order (``on_alert`` gets
        #: each too, at once).
        self.alerts: list[Alert] = []
        self._leader = self._new_leader()
        self._turn()  # registers every schedule: a baseline at now

    def _new_leader(self) -> LeaderThread[Any]:
        middleware = self.middleware
        clock = ServerClock(monotonic=lambda: self._now / 1000, wall=lambda: self._now / 1000)
        store = InMemoryStore(self.server, clock=clock, ttl_ms=middleware.lock_ttl, prefix=middleware.prefix)
        logger = logging.Logger("dramatiq_cron_middleware.testing.leader")  # outside the hierarchy: quiet
        logger.addHandler(self._errors)
        leader: LeaderThread[Any] = LeaderThread(
            store=store,
            boundary=_Recording(self.broker, store.keys, self._sent, mark_ms=middleware.lock_ttl),
            schedules=middleware.all_schedules(),
            timing=middleware.timing,
            logger=logger,
            observer=HealthObserver(self._monitor, None),
            pace=False,
            one_shot_retention_ms=middleware.config.one_shot_retention,
        )
        return leader

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
        first = len(self.enqueued)
        self._turn()  # a leader decides at once when it takes over
        while True:
            due = self._leader.queue.next_due_ms()
            if due is None or due > target:
                break
            self._now = max(self._now, due)
            self._turn()
        self._now = target
        self._turn()
        return self.enqueued[first:]

    def _turn(self) -> None:
        """Turn the leader until it leads, is in sync and has nothing due
        (a takeover, when the fake clock jumped past its lease, takes a few
        turns; nobody else competes, so the lease is free at once)."""
        leader = self._leader
        for _ in range(8):
            feed = leader.firing.feed
            if leader.leadership is None:
                self.server.delete_lease()  # the only candidate: a lease of its own past term
            elif feed is not None:
                # What an idle leader's wait on Redis does: learn of runtime writes.
                feed.notified(leader.lease.wait_for_push(feed.notify_key, 0, bound_ms=0))
            leader.step()
            # No worker reports back here (overlap="skip"): every tick fires.
            self.server.running.clear()
            self._collect()
            self._decide()
            due = leader.queue.next_due_ms()
            if leader.leadership is not None and leader.queue.in_sync and (due is None or due > self._now):
                return
        raise RuntimeError(f"the simulated leader did not settle at {self.now.isoformat()}")

    def runs(self, schedule_id: str, *, limit: int = 100) -> list[RunRecord]:
        """A schedule's recorded runs, newest first (as ``dramatiq-cron runs``)."""
        self.middleware.run_recorder(self.broker).flush(30)  # the records are written from a thread of their own
        found = (parse_run(schedule_id, text) for text in self.run_store.runs_of(schedule_id, limit=limit))
        return [run for run in found if run is not None]

    def health(self) -> dict[str, str]:
        """Every schedule's health at the fake time (as ``dramatiq-cron
        check``), after the simulated leader decided on what the workers
        recorded so far."""
        self._decide()
        schedules = [*self.middleware.all_schedules(), *(r.schedule for r in self.runtime.schedules().values())]
        paused = self.server.paused
        out = {}
        for schedule in schedules:
            facts = Facts.loads(self.server.health.get(schedule.id))
            is_paused = schedule.id in paused or whole_actor(schedule.actor_name) in paused
            out[schedule.id], _ = decide_check(
                schedule,
                facts,
                self.server.ticks.get(schedule.id),
                now_ms=self._now,
                policy=self.middleware.health_policy(schedule),
                paused=is_paused,
            )
        return out

    def _describe(self, schedule_id: str) -> tuple[str, str | None, Policy]:
        return self.middleware.health_subject(schedule_id, self._leader.queue.schedules.get(schedule_id))

    def _decide(self) -> None:
        self.middleware.run_recorder(self.broker).flush(30)  # what the workers recorded so far
        leadership = self._leader.leadership
        if leadership is None:
            return
        while True:
            turn = self._monitor.turn(leadership.token)
            on_alert = self.middleware.monitor_config.on_alert
            for alert in turn.alerts:
                self.alerts.append(alert)
                if on_alert is not None:
                    on_alert(alert)
            if not turn.more:
                return

    def _collect(self) -> None:
        if self._errors.lines:
            raise RuntimeError(f"the simulated leader failed: {self._errors.lines[0]}")
        self.enqueued += self._sent
        self._sent.clear()
        history = self.server.history
        for record in history[self._history :]:
            if record.outcome == Outcome.MISSED.value:
                self.missed.append((record.schedule_id, record.tick_ms))
        self._history = len(history)

    def close(self) -> None:
        """Detach from the middleware: workers start leader threads again."""
        self.middleware.attach_simulator(None)
        self._leader.stopping.close()


class _Recording(BrokerBoundary):
    """The plain broker boundary, recording what reached the broker."""

    def __init__(self, broker: Broker, keys: Keys, into: list[Message[Any]], *, mark_ms: int) -> None:
        super().__init__(broker, Boundary.PLAIN, keys=keys, mark_ms=mark_ms)
        self.into = into

    def send(self, items: Sequence[tuple[Message[Any], int | None]], *, now_ms: int) -> list[BaseException | None]:
        failures = super().send(items, now_ms=now_ms)
        self.into += [message for (message, _), failed in zip(items, failures, strict=True) if failed is None]
        return failures


class _Errors(logging.Handler):
    """A bug in the simulated leader's loop (logged at ERROR) surfaces."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


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
      server: The simulated leader's store, where definitions are written.
    """

    def __init__(
        self, middleware: CronMiddleware, broker: Broker, *, clock: Callable[[], int], server: MemoryServer
    ) -> None:
        # Not RuntimeSchedules.__init__: nothing here talks to Redis, so the
        # client and its scripts are never set up; only the checks are shared.
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.resolve_actor = lambda actor: middleware._runtime_actor(broker, actor)
        self.timezone = middleware.timezone
        self.catch_up = middleware.catch_up
        self.catch_up_window = middleware.catch_up_window
        self._clock = clock
        self._server = server
        self._stored: dict[str, RuntimeSchedule] = {}

    def schedules(self) -> dict[str, RuntimeSchedule]:
        """Every stored runtime schedule by id."""
        return dict(self._current())

    def _current(self) -> dict[str, RuntimeSchedule]:
        """The stored schedules, less the one-shots the leader retired."""
        for sid in [sid for sid in self._stored if sid not in self._server.runtime]:
            del self._stored[sid]
        return self._stored

    def _write_prepared(
        self, prepared: Sequence[tuple[BoundSchedule, str]], condition: str
    ) -> builtins.list[RuntimeSchedule]:
        """As :meth:`RuntimeSchedules._write_prepared`, in memory."""
        for bound, _ in prepared:
            before = self._stored.get(bound.id)
            if condition == "new" and before is not None:
                raise already_exists(bound.id)
            if condition not in ("", "new") and (before is None or str(before.schedule.revision) != condition):
                raise CronScheduleError(f"runtime schedule {bound.id!r} changed while being updated; try again")
        now = self._clock()
        out = []
        written = self._server.add_runtime([bound for bound, _ in prepared])
        for schedule in written:
            before = self._stored.get(schedule.id)
            stored = RuntimeSchedule(
                schedule=schedule,
                created_ms=now if before is None else before.created_ms,
                updated_ms=now,
                as_of_ms=now,
                revision=1 if before is None else before.revision + 1,
            )
            self._stored[schedule.id] = stored
            out.append(stored)
        return out

    def remove(self, actor: object, name: str) -> bool:
        """As :meth:`RuntimeSchedules.remove`, in memory."""
        sid = _schedule_id(actor, name)
        self._server.remove_runtime(sid)
        return self._stored.pop(sid, None) is not None

    def get(self, actor: object, name: str) -> RuntimeSchedule | None:
        """As :meth:`RuntimeSchedules.get`, in memory."""
        found = self._current().get(_schedule_id(actor, name))
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
        ids = sorted(i for i in self._current() if owner is None or i.partition(":")[0] == owner)
        total = None if search is not None else len(ids)
        ids = [i for i in ids if (search is None or search.lower() in i.lower()) and (cursor is None or i > cursor)]
        page = ids[:limit]
        now = self._clock()
        items = [dataclasses.replace(self._stored[i], as_of_ms=now) for i in page]
        return RuntimePage(items=items, cursor=page[-1] if len(ids) > limit else None, total=total)

    def count_by_actor(self) -> dict[str, int]:
        """As :meth:`RuntimeSchedules.count_by_actor`, in memory."""
        out: dict[str, int] = {}
        for sid in sorted(self._current()):
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
