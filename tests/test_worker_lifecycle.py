"""Workers started and stopped in one process, as test suites do (issues 27
and 28 item 2).

- dramatiq's worker threads set ``running = True`` as the first line of
  their ``run``, while ``Worker.stop`` sets it to False: a stop landing in
  between is lost and the thread loops forever (the hang of
  tests/test_stub_broker.py, one thread in ``work_queue.get``).
  ``testing.running_worker`` stops only threads that run.
- Every ``CronMiddleware`` whose worker booted stayed alive for the life of
  the process (an ``atexit`` closure held its bound method), with its
  pools and sockets: hundreds of fds and Redis connections per hundred
  fixture-style tests.  A stopped middleware releases everything, and the
  process-wide hand-over (handlers, ``atexit``, relay thread) is installed
  once and serves every live middleware.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.store.connection import ENV_URL
from dramatiq_cron_middleware.testing import running_worker
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

CYCLES = 100
#: Growth over CYCLES cycles that is noise, not a leak (a leak of one per
#: cycle is CYCLES).
SLACK = 10


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def thread_names() -> list[str]:
    return sorted(t.name for t in threading.enumerate())


class _HoldFirstRun(logging.Filter):
    """Holds the first worker thread inside its first line of ``run``
    (the DEBUG record "Running worker thread...", logged before it sets
    ``running``) until a stop is under way ("Stopping worker thread...")
    or ``hold`` seconds pass: the instant a loaded machine leaves a thread
    waiting for the GIL."""

    def __init__(self, hold: float) -> None:
        super().__init__()
        self.hold = hold
        self.stopping = threading.Event()
        self.held = threading.Event()
        self._first = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Stopping worker thread"):
            self.stopping.set()
        elif message.startswith("Running worker thread") and self._first.acquire(blocking=False):
            self.held.set()
            self.stopping.wait(self.hold)
        return True


@pytest.fixture
def held_first_run() -> Iterator[_HoldFirstRun]:
    logger = logging.getLogger("dramatiq.worker.WorkerThread")
    hold = _HoldFirstRun(hold=2.0)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addFilter(hold)
    yield hold
    logger.removeFilter(hold)
    logger.setLevel(level)


def test_running_worker_stops_a_worker_whose_thread_had_not_run_yet(
    held_first_run: _HoldFirstRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a worker thread that has started but not yet run its first
    line when the test is done with the worker, when the worker is stopped
    through ``running_worker``, then the stop returns and every thread
    ends.  (A plain ``Worker.start(); Worker.stop()`` loses the stop: the
    thread sets ``running`` after it and loops forever.)"""
    monkeypatch.delenv(ENV_URL, raising=False)
    broker = StubBroker()
    broker.add_middleware(CronMiddleware())

    @dramatiq.actor(broker=broker)
    def job() -> None: ...

    threads: list[threading.Thread] = []

    def cycle() -> None:
        with running_worker(broker, worker_threads=2, worker_timeout=50, stop_timeout=5_000) as worker:
            threads.extend([*worker.workers, *worker.consumers.values()])

    stopper = threading.Thread(target=cycle, daemon=True)
    stopper.start()
    assert held_first_run.held.wait(30), "the first worker thread never logged its first line"
    stopper.join(60)
    assert not stopper.is_alive(), "running_worker did not return"
    wait_for(lambda: not any(t.is_alive() for t in threads), timeout=30, what="every worker thread to end")
    assert not [m for m in broker.middleware if getattr(m, "worker", None) is not None]
    broker.close()


@pytest.fixture
def admin(redis_server: RedisServer) -> redis.Redis:
    return redis_server.client()


def _brokers(redis_server: RedisServer) -> dict[str, Callable[[], tuple[dramatiq.Broker, CronMiddleware]]]:
    def stub() -> tuple[dramatiq.Broker, CronMiddleware]:
        middleware = CronMiddleware(redis=redis_server.url)
        broker = StubBroker()
        broker.add_middleware(middleware)
        return broker, middleware

    def redis_broker() -> tuple[dramatiq.Broker, CronMiddleware]:
        middleware = CronMiddleware()
        broker = RedisBroker(url=redis_server.url)
        broker.add_middleware(middleware)
        return broker, middleware

    return {"stub": stub, "redis": redis_broker}


def _declare(broker: dramatiq.Broker) -> None:
    @dramatiq.actor(broker=broker, cron="0 0 1 1 *")
    def yearly() -> None: ...


def _wait_leading(middleware: CronMiddleware, admin: redis.Redis) -> None:
    """Wait until the middleware leads (its leader thread won the lease)."""
    wait_for(
        lambda: middleware.leader is not None and middleware.leader.leading,
        timeout=30,
        what="the worker to lead",
    )


class Levels:
    """fds, threads and Redis clients of this process, against a baseline."""

    def __init__(self, admin: redis.Redis) -> None:
        self.admin = admin
        gc.collect()
        self.fds, self.threads, self.clients = open_fds(), threading.active_count(), self.redis_clients()
        self.names = thread_names()

    def redis_clients(self) -> int:
        return len(self.admin.client_list())

    def growth(self) -> tuple[int, int, int]:
        gc.collect()
        return (open_fds() - self.fds, threading.active_count() - self.threads, self.redis_clients() - self.clients)

    def assert_flat(self, what: str) -> None:
        """Flat once the last stop's threads had time to end (generous)."""
        try:
            wait_for(
                lambda: (g := self.growth())[0] < SLACK and g[1] <= 0 and g[2] < SLACK,
                timeout=30,
                interval=0.2,
                what="flat levels",
            )
        except AssertionError:
            fds, threads, clients = self.growth()
            raise AssertionError(
                f"{what}: +{fds} fds, +{threads} threads, +{clients} Redis clients after {CYCLES} cycles; "
                f"threads before {self.names}, after {thread_names()}"
            ) from None
        assert thread_names().count("dramatiq-cron-signals") <= 1, thread_names()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stub", "redis"])
def test_a_hundred_worker_cycles_on_one_broker_stop_each_time_and_leave_nothing_behind(
    kind: str, redis_server: RedisServer, admin: redis.Redis
) -> None:
    """Given one broker with the middleware on, when a dramatiq Worker is
    started and stopped a hundred times in this process, each time after
    it led, then every stop returns within 10 s (one that lost a thread
    waited ten minutes) and no thread, fd or Redis connection accumulates
    (the signal relay thread is one)."""
    broker, middleware = _brokers(redis_server)[kind]()
    _declare(broker)
    levels: Levels | None = None
    slowest = 0.0
    for cycle in range(CYCLES + 1):
        with running_worker(broker, worker_threads=2, worker_timeout=50, stop_timeout=10_000) as worker:
            _wait_leading(middleware, admin)
            stopping = time.monotonic()
        slowest = max(slowest, time.monotonic() - stopping)
        assert not any(t.is_alive() for t in [*worker.workers, *worker.consumers.values()]), f"cycle {cycle}"
        if levels is None:
            levels = Levels(admin)  # after the first: the process-wide hand-over is installed then
    assert slowest < 10, f"a stop took {slowest:.1f} s"
    assert not admin.exists("{dramatiq-cron}:lease"), "the last stop did not release the lease"
    assert levels is not None
    levels.assert_flat(kind)
    broker.close()


def _fixture_cycle(make: Callable[[], tuple[dramatiq.Broker, CronMiddleware]], admin: redis.Redis) -> None:
    """One test of the ordinary fixture pattern: a new broker and
    middleware, a worker that boots (and leads), stopped, broker closed."""
    broker, middleware = make()
    _declare(broker)
    with running_worker(broker, worker_threads=2, worker_timeout=50, stop_timeout=10_000):
        _wait_leading(middleware, admin)
    broker.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stub", "redis"])
def test_a_hundred_fixture_style_tests_leave_fds_threads_and_redis_connections_flat(
    kind: str, redis_server: RedisServer, admin: redis.Redis
) -> None:
    """Given the fixture pattern (a new broker, middleware and worker per
    test), when a hundred such tests run in one process, then fds, threads
    and Redis client connections stay flat.  (Every booted middleware
    stayed alive, held by its atexit hook, with 3-5 open connections.)"""
    make = _brokers(redis_server)[kind]
    _fixture_cycle(make, admin)
    levels = Levels(admin)
    for _ in range(CYCLES):
        _fixture_cycle(make, admin)
    levels.assert_flat(kind)


def test_a_stopped_middleware_is_collected(redis_server: RedisServer, admin: redis.Redis) -> None:
    """Given a middleware whose worker booted, led and stopped, when the
    test lets go of its broker, then the middleware is garbage (nothing of
    the process-wide hand-over holds it)."""
    before = set(threading.enumerate())
    broker, middleware = _brokers(redis_server)["stub"]()
    _declare(broker)
    with running_worker(broker, worker_threads=1, worker_timeout=50):
        _wait_leading(middleware, admin)
    broker.close()
    ref = weakref.ref(middleware)
    del broker, middleware
    # A stopped middleware's threads finish what they hold (a run record
    # still being written, a leader's last release) within their own
    # bounds; a loaded machine may still be running them when the stop
    # returns. Once they have ended, nothing may hold the middleware.
    wait_for(
        lambda: not [t for t in threading.enumerate() if t not in before and t.name.startswith(_OURS)],
        timeout=30,
        what="the stopped middleware's threads to end",
    )
    gc.collect()
    assert ref() is None, [type(r).__name__ for r in gc.get_referrers(ref())]


#: The threads a middleware starts (the process-wide signal relay excepted:
#: it serves every live hand-over, holding each weakly).
_OURS = (
    "cron-runs-",
    "cron-run-heartbeat",
    "cron-health",
    "cron-alerts-",
    "dramatiq-cron-leader",
    "dramatiq-cron-read-ahead",
)


def test_a_signal_hands_over_the_lease_of_every_live_middleware(redis_server: RedisServer, admin: redis.Redis) -> None:
    """Given two middlewares in one process, each leading under its own
    prefix, when the process gets SIGTERM, then both leases are released
    (the hand-over used to serve only the first middleware of a process)."""
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    brokers: list[dramatiq.Broker] = []
    try:
        with _leading(redis_server, "first", brokers, admin), _leading(redis_server, "second", brokers, admin):
            assert admin.exists("{first}:lease") and admin.exists("{second}:lease")
            signal.raise_signal(signal.SIGTERM)
            assert calls == [signal.SIGTERM], "the signal did not reach the handler installed before"
            assert not admin.exists("{first}:lease"), "the first middleware's lease is still held"
            assert not admin.exists("{second}:lease"), "the second middleware's lease is still held"
    finally:
        signal.signal(signal.SIGTERM, previous)
        for broker in brokers:
            broker.close()


class _leading:
    """A StubBroker with a middleware under ``prefix``, its worker running
    and leading, for the ``with`` block."""

    def __init__(self, server: RedisServer, prefix: str, brokers: list[dramatiq.Broker], admin: redis.Redis) -> None:
        self.middleware = CronMiddleware(redis=server.url, prefix=prefix)
        broker = StubBroker()
        broker.add_middleware(self.middleware)
        brokers.append(broker)
        _declare(broker)
        self.running = running_worker(broker, worker_threads=1, worker_timeout=50)
        self.admin = admin

    def __enter__(self) -> _leading:
        self.running.__enter__()
        _wait_leading(self.middleware, self.admin)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.running.__exit__(*exc)
