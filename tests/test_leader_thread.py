"""The leader thread in one process: it starts once, sleeps instead of
polling, stops within a second, and recovers from a flushed Redis."""

from __future__ import annotations

import collections
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dramatiq
import pytest
import redis
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.store import codes
from dramatiq_cron_middleware.store.codes import script_source
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
    """A 30 s lease: gone after a stop, it was released, not expired."""
    broker, middleware = new_year_app(redis_server.url, lock_ttl=30_000)
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


def test_the_leader_thread_starts_once_and_a_stop_releases_the_lease_and_ends_it(
    stub_app: tuple[StubBroker, CronMiddleware], redis_server: RedisServer
) -> None:
    """The stop returns with the lease released (its wait on Redis for the
    thread is bounded by ``stop``'s timeout, a figure for benchmarks), and
    the thread ends."""
    broker, middleware = stub_app
    worker = Worker(broker, worker_threads=1)
    before = len(leader_threads())
    middleware.after_worker_boot(broker, worker)
    middleware.after_worker_boot(broker, worker)  # some integrations fire hooks twice
    assert len(leader_threads()) == before + 1
    wait_for(lambda: redis_server.client().exists(LEASE), timeout=30, what="the lease")
    thread = middleware.leader
    assert thread is not None
    middleware.before_worker_shutdown(broker, worker)
    assert not redis_server.client().exists(LEASE), "the lease was not released"
    wait_for(lambda: not thread.is_alive(), timeout=30, what="the leader thread to end")


@pytest.fixture
def idle_leader(redis_server: RedisServer) -> Iterator[tuple[StubBroker, CronMiddleware]]:
    """A leader with a 6 s lease (renewed every 2 s) whose only schedule is
    due next New Year."""
    broker, middleware = new_year_app(redis_server.url, lock_ttl=6000)
    middleware.start(broker)
    wait_for(lambda: redis_server.client().exists(LEASE), timeout=30, what="the lease")
    yield broker, middleware
    middleware.stop()
    broker.close()


@pytest.fixture
def sleepy_leader(redis_server: RedisServer) -> Iterator[tuple[StubBroker, CronMiddleware]]:
    """A leader with a 60 s lease (renewed every 24 s: longer than any stall
    of a loaded machine) whose only schedule is due next New Year."""
    broker, middleware = new_year_app(redis_server.url, lock_ttl=60_000)
    middleware.start(broker)
    wait_for(lambda: redis_server.client().exists(LEASE), timeout=30, what="the lease")
    yield broker, middleware
    middleware.stop()
    broker.close()


@contextmanager
def traffic(server: RedisServer) -> Iterator[list[str]]:
    """Every command clients send to ``server`` while the block runs
    (``MONITOR``), in order: a script by its file's name, any other command
    by its name.  Commands run inside scripts are no round trips and are
    left out.  Events, counted whatever the clock does."""
    lua = Path(codes.__file__).parent / "lua"
    names = {hashlib.sha1(script_source(p.stem).encode()).hexdigest(): p.stem for p in lua.glob("*.lua")}
    seen: list[str] = []
    # No socket timeout (redis-py 8 defaults to 5 s): an idle leader may
    # send nothing for longer.
    client = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True, socket_timeout=None)
    monitor = client.monitor()
    monitor.__enter__()  # MONITOR is on once this returns
    end = f"traffic-end-{id(seen)}"

    def listen() -> None:
        for command in monitor.listen():
            words = command["command"].split()
            if words == ["ECHO", end]:
                return
            if command.get("client_type") == "lua" or command.get("client_address") == "lua":
                continue
            name = words[0].upper()
            seen.append(names.get(words[1], words[1]) if name in ("EVALSHA", "EVAL") else name)

    listener = threading.Thread(target=listen, name="traffic", daemon=True)
    listener.start()
    try:
        yield seen
    finally:
        server.client().echo(end)  # after everything sent before it: seen last
        listener.join(30)
        monitor.__exit__(None, None, None)


@pytest.mark.slow
def test_an_idle_leader_sends_only_renewals_and_waits_on_redis_for_changes(
    idle_leader: tuple[StubBroker, CronMiddleware], redis_server: RedisServer
) -> None:
    """Given an idle leader renewing every 2 s, when it idles for three
    renewal intervals, then in each it sent its renewal and nothing else:
    it waits for runtime schedule changes on its subscription, which sends
    nothing (it used to send a blocking pop per renewal, and before that
    read the version counter every 500 ms).  Its process also runs run
    monitoring, which reads the
    schedules' health once after each wait on the events stream and looks
    at the alert outbox once per renewal interval.  Counted
    between renewals, not over a span of wall time: a starved leader renews
    late, and sends no more for it."""
    _, middleware = idle_leader
    thread = middleware.leader
    assert thread is not None and thread.native_id is not None
    with traffic(redis_server) as seen:
        # The first renewal loads its script (EVALSHA, SCRIPT LOAD, EVALSHA):
        # the window starts once the leader idles in steady state.
        wait_for(lambda: seen.count("renew") >= 3, timeout=60, what="the first renewals")
        cpu_before = thread_cpu_seconds(thread.native_id)
        wait_for(lambda: seen.count("renew") >= 6, timeout=60, what="three more renewals")
        cpu = thread_cpu_seconds(thread.native_id) - cpu_before
        renewals = [n for n, command in enumerate(seen) if command == "renew"]
        window = seen[renewals[2] + 1 : renewals[5] + 1]  # three renewal intervals, each ending in its renewal
    counts = collections.Counter(window)
    assert counts["renew"] == 3
    # An idle leader reads the counter only when its wait on Redis ended
    # more than 500 ms before its next turn, which a starved CPU can cause once.
    assert counts["GET"] <= 1, f"{counts['GET']} version reads in three renewal intervals: {window}"
    # Subscribed once, when it took the lease: waiting sends nothing.
    assert not counts["BLPOP"] and not counts["SUBSCRIBE"], f"the idle leader sent more than renewals: {window}"
    # Run monitoring: a health read after each wait on the events stream,
    # one look at the alert outbox per idle wait of its delivery thread.
    assert counts["health_read"] <= counts["XREAD"] + 1, f"run monitoring polled: {window}"
    assert counts["LRANGE"] <= counts["renew"] + 1, f"the alert outbox was polled: {window}"
    others = set(counts) - {"renew", "GET", "health_read", "XREAD", "LRANGE", "HELLO", "CLIENT"}
    assert not others, f"an idle leader sent {others}: {window}"
    # A busy loop burns CPU all along; sleeping costs a few milliseconds.
    assert cpu < 0.5, f"the idle leader thread used {cpu:.2f} s of CPU in three renewal intervals"


@pytest.mark.slow
def test_an_idle_leader_whose_blocking_wait_gets_no_reply_still_renews_in_time(
    idle_leader: tuple[StubBroker, CronMiddleware],
) -> None:
    """Given an idle leader whose wait on Redis for runtime changes gets no
    reply by its timeout (a starved redis-server or thread answers late),
    then it stops awaiting the reply when its renewal is due, renews, and
    keeps its lease (issue 27: it awaited it up to its firing deadline, so
    a reply a second late on a loaded machine cost it the lease).  The
    stand-in wait returns only at its bound: the worst a late reply costs."""
    _, middleware = idle_leader
    thread = middleware.leader
    assert thread is not None
    wait_for(lambda: thread.leading, timeout=30, what="leadership")
    epoch = thread.epoch
    waits: list[int] = []

    def no_reply(key: str, timeout_ms: int, *, bound_ms: int) -> str | None:
        waits.append(bound_ms)
        thread.stopping.wait(max(bound_ms, timeout_ms) / 1000)
        return None

    thread.firing.lease.wait_for_push = no_reply  # type: ignore[method-assign]
    wait_for(lambda: len(waits) >= 3, timeout=60, what="three unanswered waits")
    assert thread.epoch == epoch, f"the leader lost its lease (epoch {epoch} -> {thread.epoch}); waits {waits}"


def test_an_idle_leader_that_misses_a_notification_applies_the_change_after_its_next_renewal(
    idle_leader: tuple[StubBroker, CronMiddleware],
) -> None:
    """Given an idle leader whose wait for runtime changes never reports
    one (a notification lost with a connection, or a writer of an earlier
    version that does not publish), when a schedule is added, then the
    renewal's version counter shows the change and the leader applies it
    (it used to wait for the next notification, or a takeover)."""
    _, middleware = idle_leader
    thread = middleware.leader
    assert thread is not None
    wait_for(lambda: thread.leading, timeout=30, what="leadership")

    waits: list[int] = []

    def deaf(key: str, timeout_ms: int, *, bound_ms: int) -> str | None:
        waits.append(bound_ms)
        thread.stopping.wait(min(bound_ms, timeout_ms) / 1000)
        return None

    thread.firing.lease.wait_for_push = deaf  # type: ignore[method-assign]
    # The real wait under way when it was replaced has ended: none reads now.
    wait_for(lambda: waits, timeout=30, what="a deaf wait")
    added = middleware.add("tenant_report", "0 9 * * *", name="acme")
    wait_for(lambda: added.id in thread.queue.schedules, timeout=60, what="the add to take effect")


def test_an_idle_leader_applies_an_add_and_a_remove_before_its_next_renewal(
    sleepy_leader: tuple[StubBroker, CronMiddleware], redis_server: RedisServer
) -> None:
    """Given an idle leader blocked until its next renewal, when a runtime
    schedule is added and then removed, then each takes effect in the
    leader's tick queue before that renewal: the change's notification
    woke it.  (Told apart by the lease's renewal count, not by a clock: a
    starved leader wakes late, but still before it renews.)"""
    _, middleware = sleepy_leader
    thread = middleware.leader
    assert thread is not None
    client = redis_server.client()

    def waiting() -> bool:  # subscribed: a change published now is read at once
        return any(c["cmd"] == "subscribe" and c["sub"] == "2" for c in client.client_list())

    wait_for(waiting, timeout=30, what="the leader to wait on Redis")
    renewed = client.hget(LEASE, "seq")
    added = middleware.add("tenant_report", "0 9 * * *", name="acme")
    wait_for(lambda: added.id in thread.queue.schedules, timeout=30, interval=0.005, what="the add to take effect")
    assert client.hget(LEASE, "seq") == renewed, "the add waited for the renewal"
    wait_for(waiting, timeout=30, what="the leader to wait on Redis again")
    assert middleware.remove("tenant_report", "acme")
    wait_for(
        lambda: added.id not in thread.queue.schedules, timeout=30, interval=0.005, what="the remove to take effect"
    )
    assert client.hget(LEASE, "seq") == renewed, "the remove waited for the renewal"


@pytest.mark.slow
def test_an_idle_follower_costs_about_two_commands_per_lease(redis_server: RedisServer) -> None:
    """A follower blocks on Redis until the lease would expire or is
    released; it does not poll faster than the lease.  (6 s leases, the
    holder's renewed by hand every 0.5 s: no stall of a loaded machine
    costs the holder its lease.  A starved follower sends less, never more.)"""
    from dramatiq_cron_middleware.store.clock import ServerClock
    from dramatiq_cron_middleware.store.connection import scheduler_clients
    from dramatiq_cron_middleware.store.keys import Keys
    from dramatiq_cron_middleware.store.lease import Candidate, Lease

    broker, middleware = new_year_app(redis_server.url, lock_ttl=6000)

    # Another candidate holds the lease, renewing it by hand.
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=6000)
    holder = Lease(
        client=client,
        blocking_client=blocking,
        keys=Keys("dramatiq-cron"),
        ttl_ms=6000,
        clock=ServerClock(),
        candidate=Candidate("other", 1),
    )
    holder.acquire()
    middleware.start(broker)
    try:
        wait_for(
            lambda: redis_server.client().zcard("{dramatiq-cron}:candidates") == 2, timeout=30, what="the follower"
        )
        first = commands(redis_server)
        end = time.monotonic() + 6.0
        renewals = 0
        while time.monotonic() < end:
            assert holder.renew()
            renewals += 1
            time.sleep(0.5)
        # Each renewal: its EVALSHA and the GET (the runtime version) it runs inside.
        sent = commands(redis_server) - first - 2 * renewals
        # At most two waits (its attempt and its wait each) in one lease;
        # polling every retry interval would be a dozen or more.
        assert sent <= 2 * 2 + 2, f"the follower sent {sent} round trips in one lease"
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
        wait_for(lambda: len(enqueued) >= 2, timeout=60, what="two ticks")
        leader = middleware.leader
        assert leader is not None
        token = leader.lease.token
        redis_server.client().flushall()
        count = len(enqueued)
        wait_for(lambda: leader.lease.token not in (None, token), timeout=60, what="a new acquisition")
        wait_for(lambda: len(enqueued) >= count + 2, timeout=60, what="ticks after the flush")
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
        wait_for(lambda: len(seen) >= 4, timeout=60, what="four jittered ticks")
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
