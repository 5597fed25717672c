"""The leader thread in one process: it starts once, sleeps instead of
polling, stops within a second, and recovers from a flushed Redis."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

LEASE = "{dramatiq-cron}:lease"


def new_year_app(url: str, *, lock_ttl: int) -> tuple[StubBroker, CronMiddleware]:
    """A StubBroker app whose only schedule is due next New Year, and a
    plain actor (``tenant_report``) for runtime schedules."""
    broker = StubBroker()
    middleware = CronMiddleware(redis=url, lock_ttl=lock_ttl)
    broker.add_middleware(middleware)

    @dramatiq.actor(broker=broker, cron="0 0 1 1 *")
    def new_year() -> None:
        pass

    @dramatiq.actor(broker=broker)
    def tenant_report() -> None:
        pass

    return broker, middleware


@pytest.fixture
def stub_app(redis_server: RedisServer) -> Iterator[tuple[StubBroker, CronMiddleware]]:
    broker, middleware = new_year_app(redis_server.url, lock_ttl=1500)
    dramatiq.set_broker(broker)
    yield broker, middleware
    middleware.stop()
    broker.close()


def leader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dramatiq-cron-leader" and t.is_alive()]


def thread_cpu_seconds(native_id: int) -> float:
    """User plus system CPU time of one thread of this process."""
    fields = open(f"/proc/self/task/{native_id}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commands(server: RedisServer, names: tuple[str, ...] = ("evalsha", "eval", "blpop", "get")) -> int:
    """Round trips clients made: script calls and blocking pops, and GETs
    (the runtime schedules' version).  (Redis' own total also counts the
    commands each script runs inside.)"""
    stats = server.client().info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


def test_the_leader_thread_starts_once_and_stops_within_a_second(
    stub_app: tuple[StubBroker, CronMiddleware], redis_server: RedisServer
) -> None:
    broker, middleware = stub_app
    worker = Worker(broker, worker_threads=1)
    before = len(leader_threads())
    middleware.after_worker_boot(broker, worker)
    middleware.after_worker_boot(broker, worker)  # some integrations fire hooks twice
    assert len(leader_threads()) == before + 1
    wait_for(lambda: redis_server.client().exists(LEASE), timeout=5, what="the lease")
    thread = middleware.leader
    assert thread is not None
    started = time.monotonic()
    middleware.before_worker_shutdown(broker, worker)
    stopped = time.monotonic() - started
    assert not thread.is_alive()
    assert stopped < 1.0, f"stopping took {stopped:.3f}s"
    assert not redis_server.client().exists(LEASE), "the lease was not released"


@pytest.fixture
def idle_leader(redis_server: RedisServer) -> Iterator[tuple[StubBroker, CronMiddleware]]:
    """A leader with a 6 s lease (renewed every 2 s) whose only schedule is
    due next New Year."""
    broker, middleware = new_year_app(redis_server.url, lock_ttl=6000)
    middleware.start(broker)
    wait_for(lambda: redis_server.client().exists(LEASE), timeout=5, what="the lease")
    yield broker, middleware
    middleware.stop()
    broker.close()


def test_an_idle_leader_sends_only_renewals_and_waits_on_redis_for_changes(
    idle_leader: tuple[StubBroker, CronMiddleware], redis_server: RedisServer
) -> None:
    """Given an idle leader renewing every 2 s, when it idles for four
    seconds, then it sent its renewals and one blocking wait for runtime
    schedule changes per renewal, and never polled the runtime schedules'
    version counter (it used to read it every 500 ms: ten round trips
    instead of about four).  Its process also reads run monitoring's
    events about once per renewal interval (an idle one waits on Redis in
    between: not counted here)."""
    _, middleware = idle_leader
    thread = middleware.leader
    assert thread is not None and thread.native_id is not None
    first = commands(redis_server)
    first_reads = commands(redis_server, ("get",))
    cpu_before = thread_cpu_seconds(thread.native_id)
    time.sleep(4.0)  # the measurement window itself
    cpu = thread_cpu_seconds(thread.native_id) - cpu_before
    sent = commands(redis_server) - first
    reads = commands(redis_server, ("get",)) - first_reads
    # Polling read the counter every 500 ms (8 reads here).  An idle leader
    # reads it only when its wait on Redis ended more than 500 ms before its
    # next turn, which a starved CPU (a loaded CI machine) can cause once.
    assert reads <= 1, f"{reads} version reads in 4 s"
    # Per renewal interval: the renewal, the wait for changes, and run
    # monitoring's read (3); a starved CPU may end each of the two threads'
    # waits early once (+2), and the window may hold one more renewal (+1).
    # Polling every retry interval would be 12 or more of either.
    assert 2 <= sent <= 3 * (4.0 / 2.0) + 3, f"{sent} round trips in 4 s"
    # A busy loop burns the whole window; sleeping costs a few milliseconds.
    assert cpu < 0.5, f"the idle leader thread used {cpu:.2f} s of CPU in 4 s"


def test_an_idle_leader_applies_an_add_and_a_remove_within_a_second(
    idle_leader: tuple[StubBroker, CronMiddleware],
) -> None:
    """Given an idle leader blocked until its next renewal (2 s away), when
    a runtime schedule is added and then removed, then each takes effect in
    the leader's tick queue within a second."""
    _, middleware = idle_leader
    thread = middleware.leader
    assert thread is not None
    time.sleep(0.3)  # let the leader settle into its wait (not a timing assertion)
    added = middleware.add("tenant_report", "0 9 * * *", name="acme")
    wait_for(lambda: added.id in thread.queue.schedules, timeout=1.0, interval=0.005, what="the add to take effect")
    assert middleware.remove("tenant_report", "acme")
    wait_for(
        lambda: added.id not in thread.queue.schedules, timeout=1.0, interval=0.005, what="the remove to take effect"
    )


def test_an_idle_follower_costs_about_two_commands_per_lease(redis_server: RedisServer) -> None:
    """A follower blocks on Redis until the lease would expire or is
    released; it does not poll faster than the lease."""
    from dramatiq_cron_middleware.store.clock import ServerClock
    from dramatiq_cron_middleware.store.connection import scheduler_clients
    from dramatiq_cron_middleware.store.keys import Keys
    from dramatiq_cron_middleware.store.lease import Lease

    broker, middleware = new_year_app(redis_server.url, lock_ttl=1500)

    # Another candidate holds the lease, renewing it by hand.
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=1500)
    holder = Lease(
        client=client,
        blocking_client=blocking,
        keys=Keys("dramatiq-cron"),
        ttl_ms=1500,
        clock=ServerClock(),
        host="other",
        pid=1,
    )
    holder.acquire()
    middleware.start(broker)
    try:
        wait_for(lambda: redis_server.client().zcard("{dramatiq-cron}:candidates") == 2, timeout=5, what="the follower")
        first = commands(redis_server)
        end = time.monotonic() + 3.0
        renewals = 0
        while time.monotonic() < end:
            assert holder.renew()
            renewals += 1
            time.sleep(0.5)
        sent = commands(redis_server) - first - renewals
        assert sent <= 3.0 / 1.0 * 2 + 2, f"the follower sent {sent} round trips in 3 s"
        assert middleware.leader is not None and not middleware.leader.leading
    finally:
        middleware.stop()
        holder.release()


def test_a_flushed_redis_deposes_the_leader_which_recovers_without_refiring(redis_server: RedisServer) -> None:
    """Given a leader firing a per-second schedule, when Redis is flushed,
    then the leader steps down (WARNING), reacquires, and no tick is
    enqueued twice."""
    broker = StubBroker()
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=1000)
    broker.add_middleware(middleware)
    enqueued: list[str] = []

    class Record(dramatiq.Middleware):
        def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message, delay: int | None) -> None:  # type: ignore[type-arg]
            enqueued.append(message.options["cron_tick"])

    broker.add_middleware(Record())

    @dramatiq.actor(broker=broker, cron="* * * * * *")
    def every_second() -> None:
        pass

    middleware.start(broker)
    try:
        wait_for(lambda: len(enqueued) >= 2, timeout=10, what="two ticks")
        leader = middleware.leader
        assert leader is not None
        token = leader.lease.token
        redis_server.client().flushall()
        count = len(enqueued)
        wait_for(lambda: leader.lease.token not in (None, token), timeout=10, what="a new acquisition")
        wait_for(lambda: len(enqueued) >= count + 2, timeout=10, what="ticks after the flush")
        assert len(enqueued) == len(set(enqueued)), f"duplicates: {enqueued}"
    finally:
        middleware.stop()


def test_a_jittered_schedule_still_enqueues_each_tick_once_with_a_bounded_delay(redis_server: RedisServer) -> None:
    """Given ``jitter=800`` on a per-second schedule, when a real leader
    fires it, then each tick is enqueued once, with a delay within
    [0, 800] ms that is the same function of the tick everywhere, and the
    message still names the scheduled tick."""
    from dramatiq_cron_middleware import Schedule
    from dramatiq_cron_middleware.schedules.planner import jitter_ms

    broker = StubBroker()
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=1500)
    broker.add_middleware(middleware)
    seen: list[tuple[str, str, int | None]] = []

    class Record(dramatiq.Middleware):
        def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message, delay: int | None) -> None:  # type: ignore[type-arg]
            seen.append((message.options["cron_tick"], message.message_id, delay))

    broker.add_middleware(Record())

    @dramatiq.actor(broker=broker, cron=Schedule("* * * * * *", jitter=800))
    def jittered() -> None:
        pass

    middleware.start(broker)
    try:
        wait_for(lambda: len(seen) >= 4, timeout=10, what="four jittered ticks")
    finally:
        middleware.stop()
    ticks = [tick for tick, _, _ in seen]
    assert len(ticks) == len(set(ticks)), f"a tick was enqueued twice: {ticks}"
    (schedule,) = middleware.all_schedules()
    for tick, message_id, delay in seen:
        assert tick.endswith("+00:00") and ".000" not in tick  # the scheduled instant, not the enqueue time
        expected = jitter_ms(schedule, message_id)
        assert 0 <= expected <= 800
        assert (delay or 0) == expected
    assert any(delay for _, _, delay in seen), "no tick was delayed at all"
