"""Durable claims: a granted tick reaches the broker only once a replica
holds its claim, and a leader whose writes no replica acknowledges stops
firing.

Real redis-server processes on loopback: a master with a replica (the
Sentinel crash and partition scenarios are in tests/chaos/test_replication.py).
Judged by the enqueues: no tick twice, and none lost (the catch-up fires
what fell in the outage, once, when replicas are back).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import ClaimResult
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.durability import Durability, Unconfirmed, required_replicas
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Held, Lease
from dramatiq_cron_middleware.store.ledger import Claim
from dramatiq_cron_middleware.store.operator import RedisOperator, replicas_lacking
from tests.support.inprocess import InProcessApp, in_process_app
from tests.support.instances import now_ms, wait_for
from tests.support.redis_server import RedisServer, replicas_online
from tests.support.redis_topologies import ClusterGroup
from tests.support.stores import RedisHarness

ACTORS = {"job0": "* * * * * *", "job1": "* * * * * *"}
#: Lease 2 s: the firing deadline is 1.33 s after the last confirmed renewal.
TTL_MS = 2000
#: How long the replica stays detached (a declared outage).
DETACHED_S = 3.0
#: The detach test's lease: its WAIT waits 500 ms, which a replica on a
#: loaded machine answers in time (166 ms, a 2 s lease's, it may miss).
DETACH_TTL_MS = 6000


def tick_ms(cron_tick: str) -> int:
    return int(datetime.fromisoformat(cron_tick).timestamp() * 1000)


def enqueued_ticks(app: InProcessApp) -> list[tuple[str, int]]:
    return [(actor, tick_ms(tick)) for actor, tick, _ in app.sent()]


def linked(replica: RedisServer) -> bool:
    """The replica is in sync and its master counts it (online)."""
    master_port = int(replica.client().info("replication").get("master_port", 0))
    up = replica.client().info("replication").get("master_link_status") == "up"
    if not up:
        return False
    with redis.Redis(port=master_port, socket_timeout=5) as master:
        return replicas_online(master) >= 1


@pytest.fixture
def master_and_replica() -> Iterator[tuple[RedisServer, RedisServer]]:
    with RedisServer() as master, RedisServer(extra=["--replicaof", "127.0.0.1", str(master.port)]) as replica:
        wait_for(lambda: linked(replica), timeout=60, what="the replica to sync")
        yield master, replica


@pytest.mark.slow
def test_a_leader_whose_replica_detaches_fires_nothing_until_it_is_back_then_catches_up_once(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    """Given a master with one replica (durable by default), when the
    replica detaches for 3 s: nothing granted meanwhile reaches the broker,
    one WARNING says why; once it is back, the ticks of the outage are
    caught up, each once, and one WARNING says it recovered."""
    master, replica = master_and_replica
    with in_process_app(master.url, ACTORS, lock_ttl=DETACH_TTL_MS) as app:
        wait_for(lambda: app.logged("wait for 1 Redis replica"), timeout=30, what="durable claims on")
        start = now_ms()
        wait_for(lambda: len([t for _, t in enqueued_ticks(app) if t > start]) >= 4, timeout=60, what="ticks")

        replica.client().replicaof("NO", "ONE")
        detached = now_ms()
        wait_for(lambda: app.warnings("not confirmed durable"), timeout=60, what="the WARNING")
        time.sleep(DETACHED_S)  # the declared outage itself
        # A tick claimed (and confirmed) just before the detach may still be
        # reaching the broker; none of a later second may.
        during = [t for _, t in enqueued_ticks(app) if t > detached + 1000]
        assert not during, f"enqueued while no replica acknowledged: {during}"
        # Operators see why: `status` and the dashboard read the same record.
        control = RedisOperator(client=master.client(), keys=app.keys)
        lacking = replicas_lacking(control.replicas_record())
        assert lacking is not None and (lacking.acked, lacking.required) == (0, 1), lacking
        status = app.middleware.service.status(app.middleware, declares=lambda _: True)
        assert any("0 of 1 Redis replica(s)" in p.text for p in status.problems), status.problems

        replica.client().replicaof("127.0.0.1", master.port)
        wait_for(lambda: linked(replica), timeout=60, what="the replica to sync again")
        back = now_ms()
        wait_for(lambda: len([t for _, t in enqueued_ticks(app) if t > back]) >= 4, timeout=60, what="ticks again")
        end = now_ms() - 1000

        sent = [(a, t) for a, t in enqueued_ticks(app) if start < t <= end]
        twice = [key for key, n in Counter(sent).items() if n > 1]
        assert not twice, twice
        for actor in ACTORS:
            ticks = sorted(t for a, t in sent if a == actor)
            expected = list(range(ticks[0], ticks[-1] + 1, 1000))
            assert ticks == expected, f"{actor}: lost {sorted(set(expected) - set(ticks))}"
        # One WARNING for the detach (a loaded machine may also have held a
        # replica's acknowledgement past the wait before it: a state of its own).
        since = [r.getMessage() for r in app.records() if r.created * 1000 >= detached and r.levelno >= 30]
        assert len([m for m in since if "not confirmed durable" in m]) == 1, since
        wait_for(lambda: app.warnings("writes are confirmed durable again"), timeout=30, what="recovery")
        wait_for(lambda: replicas_lacking(control.replicas_record()) is None, timeout=30, what="the record to go")
        assert not app.errors(), app.errors()


def test_replicas_zero_fires_without_waiting_for_replicas(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    """Availability over safety: ``replicas=0`` keeps firing while no
    replica is attached: it never waits for one, and no WARNING speaks of
    durability or replicas.  (Only those: a loaded machine may starve the
    leader past its 2 s lease's firing deadline, which steps it down with
    a WARNING of its own that says nothing about replicas.)"""
    master, replica = master_and_replica
    replica.client().replicaof("NO", "ONE")
    with in_process_app(master.url, ACTORS, lock_ttl=TTL_MS, replicas=0) as app:
        start = now_ms()
        wait_for(lambda: len([t for _, t in enqueued_ticks(app) if t > start]) >= 4, timeout=60, what="ticks")
        assert not app.logged("wait for"), app.logged("wait for")
        durability = [w for w in app.warnings() if "durable" in w or "replica" in w.lower()]
        assert not durability, durability


def test_on_redis_cluster_the_wait_goes_to_the_node_of_the_schedulers_slot(cluster: ClusterGroup) -> None:
    """Given a cluster whose masters have no replica, a lease that requires
    one: the acquisition runs on the node owning ``{prefix}`` and ``WAIT``
    on that same connection answers 0, so it is unconfirmed (not a
    cross-slot or routing error); with none required it leads."""
    client, blocking = scheduler_clients(cluster.url(), op_timeout_ms=1000, block_timeout_ms=2000)
    keys = Keys("durable")

    def lease(replicas: int) -> Lease:
        return Lease(
            client=client,
            blocking_client=blocking,
            keys=keys,
            ttl_ms=60_000,
            clock=ServerClock(),
            candidate=Candidate("test", 1),
            durability=Durability(replicas=replicas, wait_ms=50),
        )

    assert required_replicas(client, sentinel=False, key=keys.lease) == 0
    with pytest.raises(Unconfirmed, match="0 of 1"):
        lease(1).acquire()
    assert isinstance(lease(0).acquire(), Held)  # the unconfirmed acquisition did take it on the master
    client.close()
    blocking.close()


# -- a RedisBroker on the lease's Redis: staged, confirmed, published ---------


def queued_ids(master: RedisServer) -> list[str]:
    return [str(i) for i in master.client().lrange("dramatiq:default", 0, -1)]


def test_a_staged_claims_messages_reach_the_queue_only_when_published_and_only_once(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    """Given durable claims with a RedisBroker on the same master: a claim
    no replica set can confirm (two required, one attached) stages its
    message in the outbox and pushes nothing; once a settle is confirmed,
    publishing pushes it once, and publishing again pushes nothing."""
    master, _ = master_and_replica
    broker = RedisBroker(url=master.url)
    dramatiq.actor(lambda: None, actor_name="job", broker=broker)
    harness = RedisHarness(master)
    confirmed, unconfirmable = harness.candidate("a", ttl_ms=60_000, replicas=1), harness.candidate("b", replicas=2)
    keys = harness.keys
    acquired = confirmed.lease.acquire()
    assert isinstance(acquired, Acquired) and confirmed.lease.token is not None
    token, epoch = confirmed.lease.token, acquired.epoch
    base = confirmed.clock.now_ms() - 60_000
    confirmed.ledger.sync(token, epoch, ["job"], now_ms=base)
    message = dramatiq.Message(queue_name="default", actor_name="job", args=(), kwargs={}, options={})
    payload = BrokerBoundary(broker, Boundary.IN_CLAIM, keys=keys, mark_ms=60_000).payload(message, None, now_ms=base)
    claim = Claim(schedule_id="job", tick_ms=base + 1000, outcome="fired", fire=True, message_id=message.message_id)

    with pytest.raises(Unconfirmed):
        unconfirmable.ledger.claim(token, epoch, "b1", [claim], [payload])
    assert queued_ids(master) == [] and master.client().hexists(keys.outbox, message.message_id)
    assert confirmed.ledger.settle("b1", epoch=epoch, claims=[claim]).results == [ClaimResult.FIRE]
    assert confirmed.ledger.publish([payload]) == [True]
    assert confirmed.ledger.publish([payload]) == [False]
    assert queued_ids(master) == [message.message_id] and not master.client().exists(keys.outbox)
    assert master.client().hget("dramatiq:default.msgs", message.message_id) == payload.body
    broker.close()
    harness.close()


def test_with_a_redis_broker_on_the_same_master_each_message_is_published_once(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    """Given durable claims and a RedisBroker on the lease's master (the
    in-claim boundary): every granted message reaches the queue once,
    the broker's after_enqueue hooks run once per message, and nothing
    stays in the outbox."""
    master, _ = master_and_replica
    broker = RedisBroker(url=master.url)
    with in_process_app(None, ACTORS, lock_ttl=TTL_MS, broker=broker) as app:
        assert app.leader.boundary.mode == Boundary.IN_CLAIM
        wait_for(lambda: len(queued_ids(master)) >= 6, timeout=60, what="messages")
        app.middleware.stop()
        ids = queued_ids(master)
        assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
        assert sorted(m for _, _, m in app.sent()) == sorted(ids)
        assert not master.client().exists(app.keys.outbox)
        assert not app.errors(), app.errors()


def test_messages_a_dead_claimer_left_staged_are_published_by_the_next_leader(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    """A claimer that died after its claim was confirmed and before it
    published leaves its messages in the outbox: the next leader publishes
    them once it leads on acknowledged writes."""
    master, _ = master_and_replica
    broker = RedisBroker(url=master.url)
    with in_process_app(None, ACTORS, lock_ttl=TTL_MS, broker=broker, start=False) as app:
        message = dramatiq.Message(
            queue_name="default", actor_name="job0", args=(), kwargs={}, options={"cron_tick": "left"}
        )
        body = message.copy(options={"redis_message_id": message.message_id}).encode().decode()
        staged = f"dramatiq:default\ndramatiq:default.msgs\n{body}"
        master.client().hset(app.keys.outbox, message.message_id, staged)
        app.middleware.start(broker)
        wait_for(lambda: message.message_id in queued_ids(master), timeout=60, what="the staged message")
        assert master.client().hlen(app.keys.outbox) == 0
        assert queued_ids(master).count(message.message_id) == 1
        assert master.client().hget("dramatiq:default.msgs", message.message_id) == body
        assert ("job0", "left", message.message_id) in app.sent()
