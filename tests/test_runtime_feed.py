"""The runtime feed against a real redis-server, on an injected monotonic
clock: a takeover reads everything, then a change is read when a write's
notification wakes the idle leader (or, for a leader too busy to block,
at most once per poll interval), only what changed is applied (an added schedule synced alone,
fenced, from the baseline ``add`` wrote), a wipe reads everything again,
and a follower holds nothing."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.declared import Declared
from dramatiq_cron_middleware.leader.reports import OnceReports
from dramatiq_cron_middleware.leader.runtime_feed import RUNTIME_POLL, RuntimeFeed
from dramatiq_cron_middleware.leader.tick_queue import TickQueue
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Lease
from dramatiq_cron_middleware.store.ledger import Ledger, SyncEntry
from tests.support.redis_server import RedisServer
from tests.support.ticks import load
from tests.test_runtime_store import make_app


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Known:
    """The actors a predicate accepts."""

    def __init__(self, accepts: Callable[[str], bool]) -> None:
        self.accepts = accepts

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.accepts(name)


def leading_feed(
    redis_server: RedisServer, declared_actor: Callable[[str], bool]
) -> tuple[Any, Lease, Acquired, Monotonic, Ledger, TickQueue, RuntimeFeed]:
    """An app's store, a lease held, and a feed on an injected clock."""
    app = make_app(redis_server.url)
    keys = app.store.keys
    declared = {s.id: s for s in app.cron.all_schedules()}
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=2000, block_timeout_ms=2000)
    monotonic = Monotonic()
    clock = ServerClock(monotonic=monotonic)
    lease = Lease(client=client, blocking_client=blocking, keys=keys, ttl_ms=30_000, clock=clock)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    ledger = Ledger(client=client, keys=keys, clock=clock)
    queue = TickQueue(declared, prefix=keys.prefix)
    feed = RuntimeFeed(
        app.store,
        keys=app.store.keys,
        queue=queue,
        ledger=ledger,
        declared=Declared(declared, _Known(declared_actor)),
        clock=clock,
        report_once=OnceReports(logging.getLogger("test.feed")),
    )
    return app, lease, acquired, monotonic, ledger, queue, feed


def test_the_feed_reads_all_then_only_changes_and_again_after_a_wipe(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    app, lease, acquired, monotonic, ledger, queue, feed = leading_feed(redis_server, lambda name: name != "gone")
    keys = app.store.keys
    declared = {s.id: s for s in app.cron.all_schedules()}
    first = app.cron.add("report", "0 9 * * *", name="first")
    assert feed.stale

    # A takeover: everything, then a sync (as the leader does).
    feed.reload()
    assert not feed.stale and set(queue.schedules) == {*declared, first.id}
    load(queue, ledger.sync(lease.token, acquired.epoch, [s for s in queue.schedules]).ticks)

    # An addition seen by a leader too busy to block on notifications:
    # nothing before the poll interval, then it joins, in sync, from the
    # baseline add wrote.
    second = app.cron.add("report", "30 9 * * *", name="second")
    baseline = int(app.redis.hget(keys.ticks, second.id).split(":")[0])  # type: ignore[union-attr]
    monotonic.now += RUNTIME_POLL / 2
    feed.follow(lease.token, acquired.epoch)
    assert second.id not in queue.schedules
    monotonic.now += RUNTIME_POLL / 2
    feed.follow(lease.token, acquired.epoch)
    assert queue.schedules[second.id] == second.schedule and queue.in_sync
    assert queue.last(second.id) == baseline

    # An idle leader waits on its subscription instead: the first wait
    # subscribes, which counts as a change (read: nothing new), then a wait
    # times out (as good as a read), and a removal wakes it and is applied
    # at once, the clock standing still.
    feed.notified(lease.wait_for_push(feed.notify_key, 5000, bound_ms=6000))
    assert feed.pending
    feed.follow(lease.token, acquired.epoch)
    assert not feed.pending
    assert lease.wait_for_push(feed.notify_key, 50, bound_ms=6000) is None
    assert app.cron.remove("report", "first")
    feed.notified(lease.wait_for_push(feed.notify_key, 5000, bound_ms=6000))
    feed.follow(lease.token, acquired.epoch)
    assert first.id not in queue.schedules and second.id in queue.schedules
    # A stop pushes the candidate's own wake-up list: not a change.
    lease.wake_self()
    feed.notified(lease.wait_for_push(feed.notify_key, 5000, bound_ms=6000))
    assert not feed.pending

    # A wipe (the counter goes back): everything is read again, out of sync.
    app.redis.delete(keys.runtime, keys.runtime_revs, keys.runtime_version, keys.runtime_changes, keys.runtime_ids)
    third = app.cron.add("report", "0 18 * * *", name="third")
    monotonic.now += RUNTIME_POLL
    feed.follow(lease.token, acquired.epoch)
    assert set(queue.schedules) == {*declared, third.id} and not queue.in_sync

    # A runtime schedule of an actor this code does not declare: one WARNING.
    stored = json.loads(app.redis.hget(keys.runtime, third.id))  # type: ignore[arg-type]
    app.redis.hset(keys.runtime, "gone:x", json.dumps({**stored, "actor": "gone", "name": "x"}))
    with caplog.at_level(logging.WARNING, logger="test.feed"):
        feed.reload()
        feed.reload()
    assert "gone:x" in queue.schedules
    assert len([r for r in caplog.records if "does not declare" in r.getMessage()]) == 1

    # Leadership lost: a follower holds no runtime schedules.
    feed.forget()
    assert feed.stale and set(queue.schedules) == set(declared)


def test_the_feed_continues_a_written_schedule_from_the_entry_its_write_left(redis_server: RedisServer) -> None:
    """Given a leading feed in sync, when a schedule is replaced with the
    same ticks, the queue keeps its last decided tick (the ledger's, not
    "now"); when it is replaced with other ticks or added again after a
    removal, the queue starts it at the write; and a takeover's full sync
    then reads the same entries and rebases nothing."""
    app, lease, acquired, monotonic, ledger, queue, feed = leading_feed(redis_server, lambda name: True)
    keys = app.store.keys
    stored = app.cron.add("report", "* * * * *", name="x")
    fired = stored.created_ms - 120_000  # as if it had fired two minutes ago, and a takeover was due since
    app.redis.hset(keys.ticks, stored.id, f"{fired}:1:1")
    feed.reload()
    load(queue, ledger.sync(lease.token, acquired.epoch, [SyncEntry.of(s) for s in queue.schedules.values()]).ticks)

    def written(*args: object, **options: object) -> int | None:
        app.cron.add("report", Schedule(*args, **options), name="x")  # type: ignore[arg-type]
        monotonic.now += RUNTIME_POLL
        feed.follow(lease.token, acquired.epoch)
        assert queue.in_sync
        return queue.last(stored.id)

    assert written("* * * * *", kwargs={"tenant": 1}) == fired  # its catch-up survives
    assert written("*/2 * * * *") == app.store.get("report", "x").updated_ms  # type: ignore[union-attr]
    assert app.cron.remove("report", "x")
    monotonic.now += RUNTIME_POLL
    feed.follow(lease.token, acquired.epoch)
    assert stored.id not in queue.schedules
    assert written("*/2 * * * *") == app.store.get("report", "x").updated_ms  # type: ignore[union-attr]

    # A takeover's full sync reads the entries the writes left: no rebase.
    before = queue.last(stored.id)
    reply = ledger.sync(lease.token, acquired.epoch, [SyncEntry.of(s) for s in queue.schedules.values()])
    assert reply.ticks[stored.id] == before and stored.id not in reply.codes


@pytest.mark.slow
def test_the_leaders_wait_on_redis_ends_at_its_own_bound(redis_server: RedisServer) -> None:
    """The wait times out on this process's clock, not the server's (which
    may step back or stall): given a Redis that stalls for five seconds,
    the leader's wait for runtime changes still returns (as a timeout, not
    an error) at its own bound, while the stall still goes on."""
    keys = make_app(redis_server.url).store.keys
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=2000, block_timeout_ms=2000)
    lease = Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=30_000,
        clock=ServerClock(),
        candidate=Candidate("h", 1),
    )
    # Subscribed, as a leader is (a new subscription counts as a change).
    assert lease.wait_for_push(keys.runtime_notify, 5000, bound_ms=5000) == keys.runtime_notify
    stall = threading.Thread(
        target=lambda: redis_server.client(socket_timeout=None).execute_command("DEBUG", "SLEEP", "5")
    )
    stall.start()
    try:
        time.sleep(0.1)  # let the stall begin (the assertion is on the bound, not on this)
        assert lease.wait_for_push(keys.runtime_notify, 50, bound_ms=300) is None
        # An event, not a duration: the server has not answered its stall yet.
        assert stall.is_alive(), "the wait followed the stalled server"
    finally:
        stall.join()


def test_a_change_published_while_the_leaders_subscription_was_down_counts_on_the_new_one(
    redis_server: RedisServer,
) -> None:
    """Given a leader subscribed to runtime changes, when its connection is
    killed and a schedule is added before it reconnects (the message went
    to nobody), then its next wait subscribes again and reports a change:
    the leader reads the version rather than miss the add."""
    app = make_app(redis_server.url)
    keys = app.store.keys
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=2000, block_timeout_ms=2000)
    lease = Lease(client=client, blocking_client=blocking, keys=keys, ttl_ms=30_000, clock=ServerClock())
    assert lease.wait_for_push(keys.runtime_notify, 5000, bound_ms=5000) == keys.runtime_notify  # subscribed
    assert lease.wait_for_push(keys.runtime_notify, 50, bound_ms=5000) is None
    assert redis_server.client().client_kill_filter(_type="pubsub") == 1
    app.cron.add("report", "0 9 * * *", name="while-down")
    assert lease.wait_for_push(keys.runtime_notify, 5000, bound_ms=5000) == keys.runtime_notify
    assert lease.wait_for_push(keys.runtime_notify, 50, bound_ms=5000) is None
