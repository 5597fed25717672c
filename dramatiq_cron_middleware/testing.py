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
policy.  While it is attached, the middleware's Python API goes to the
operator service (service.py) on that store, as it goes to Redis
otherwise: runtime schedules (``cron.add``, ``cron.remove``, ``cron.list``,
``cron.runtime``) fire like declared ones, from the fake time of their
``add``, a replacement or removal takes effect as on Redis, and
``cron.pause`` (also ``until=``), ``resume``, ``trigger`` and ``backfill``
act on the simulated store.  No thread is
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

import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from dramatiq import Broker, Message, Worker
from dramatiq.worker import ConsumerThread, WorkerThread

from .leader.thread import LeaderThread
from .middleware import CronMiddleware, actor_info, find_middleware
from .monitoring.health import Facts, Policy
from .monitoring.monitor import HealthMonitor
from .monitoring.read import decide_check, every_schedule
from .monitoring.records import Alert, RunRecord, parse_run
from .monitoring.thread import HealthObserver
from .schedules.instants import duration_ms, instant_ms
from .schedules.outcome import Outcome
from .schedules.planner import message_for
from .service import Cron
from .store.abc import RunStore
from .store.boundary import Boundary, BrokerBoundary
from .store.clock import ServerClock
from .store.in_memory import InMemoryStore, MemoryOperator, MemoryRuns, MemoryRuntimeSchedules, MemoryServer
from .store.keys import Keys
from .targets import paused_by
from .wiring import Parts

__all__ = ["CronSimulator", "Instant", "SimulatedParts", "cron_middleware_of", "running_worker", "ticks_between"]

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
        for tick in schedule.cadence.ticks_between(start_ms, end_ms):
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
        #: The store the simulated leader runs on (Redis, in memory).
        self.server = MemoryServer(now_ms=lambda: self._now)
        middleware = self.middleware
        #: The runtime schedules of the simulation, in memory.
        self.runtime = MemoryRuntimeSchedules(
            self.server,
            resolve_actor=lambda actor: actor_info(broker, actor),
            timezone=middleware.timezone,
            catch_up=middleware.catch_up,
            catch_up_window=middleware.catch_up_window,
            history_length=middleware.history_length,
        )
        #: The operator service on the simulation's store: the middleware's
        #: Python API (add, pause, trigger, backfill...) goes here while attached.
        self.cron = Cron(
            store=MemoryOperator(self.server, history_length=middleware.history_length, prefix=middleware.prefix),
            runtime=self.runtime,
            declared=middleware.all_schedules,
            broker=lambda: broker,
            prefix=middleware.prefix,
            where="the simulator's store",
            in_process=True,
        )
        #: What the middleware's hooks and Python API run on while this is
        #: attached (``CronMiddleware.use_parts``): this store, its service.
        self.parts = SimulatedParts(self)
        middleware.use_parts(self.parts)
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
            declared=middleware.all_schedules(),
            timing=dataclasses.replace(middleware.timing, fast_takeover_ms=None),  # one process: nobody to depose
            logger=logger,
            observer=HealthObserver(self._monitor, None),
            pace=False,
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
            target = self._now + duration_ms(by, positive=False)
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
        out = {}
        for schedule in every_schedule(self.middleware.all_schedules(), self.runtime)[0]:
            out[schedule.id], _ = decide_check(
                schedule,
                Facts.loads(self.server.health.get(schedule.id)),
                self.server.ticks.get(schedule.id),
                now_ms=self._now,
                policy=self.middleware.health_policy(schedule),
                paused=paused_by(schedule, self.server.paused) is not None,
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
        self.middleware.use_parts(None)
        self._leader.stopping.close()


class SimulatedParts(Parts):
    """A simulator's parts, handed to the middleware through the seam its
    Redis parts use (``wiring.Parts``): the operator service and the run
    records on the simulator's memory store; nothing to boot or start (the
    simulated leader is turned by :meth:`CronSimulator.advance`), no
    running mark to clear (``overlap="skip"`` is not simulated)."""

    def __init__(self, simulator: CronSimulator) -> None:
        self.simulator = simulator

    def service(self) -> Cron:
        return self.simulator.cron

    def run_store(self) -> RunStore:
        return self.simulator.run_store


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


def _ms(value: Instant, what: str) -> int:
    return instant_ms(value, text=False, what=what)
