"""Exactly once at the broker boundary: whatever retries, stalls or
timeouts happen between the scheduler and a RedisBroker, each tick is in
the queue once.

The review's case: a RedisBroker whose client times out after 0.5 s, and a
broker Redis that answers later than that at a tick (here a slow network:
a proxy that delays the replies 0.7 s, so each command runs but its answer
arrives after the timeout).  redis-py resends the timed-out command, both
copies run, and the old pipelined dispatch pushed one tick's id twice; with
retries off, the scheduler's own retry pushed it again under a fresh redis
message id.  Two consumers fetching both entries run the actor twice.
"""

from __future__ import annotations

import collections
import json
import time

import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from redis.backoff import NoBackoff
from redis.retry import Retry

from dramatiq_cron_middleware.store.boundary import Boundary
from tests.support.inprocess import InProcessApp, in_process_app
from tests.support.instances import wait_for
from tests.support.proxy import Proxy
from tests.support.redis_server import RedisServer

ACTORS = {f"job{i}": "* * * * * *" for i in range(8)}


def queued(server: RedisServer) -> list[tuple[str, str]]:
    """(actor, cron_tick) of every entry in the broker's default queue."""
    client = server.client()
    ids = client.lrange("dramatiq:default", 0, -1)
    bodies = client.hmget("dramatiq:default.msgs", ids) if ids else []
    out = []
    for body in bodies:
        message = json.loads(body or "{}")
        out.append((message.get("actor_name", "?"), message.get("options", {}).get("cron_tick", "?")))
    return out


def slow_client_broker(url: str, retry: bool) -> RedisBroker:
    """A RedisBroker whose client gives up after 0.5 s and retries once (as
    redis-py's default does) or never.  (``RedisBroker(url=...,
    socket_timeout=...)`` would drop the timeout: dramatiq builds the pool
    from the URL alone.)"""
    client = redis.Redis.from_url(url, socket_timeout=0.5, retry=Retry(NoBackoff(), 1 if retry else 0))
    return RedisBroker(client=client)


def slow_at_ticks(proxy: Proxy, app: InProcessApp, *, delay_ms: int, ticks: int) -> None:
    """Delay the broker Redis's replies by ``delay_ms`` (longer than the
    client's timeout) across ``ticks`` ticks, then heal: every command runs,
    and its answer is lost to a timeout."""
    wait_for(lambda: len(app.sent()) >= len(ACTORS), timeout=60, what="a first round of ticks")
    proxy.reply_delay_ms = delay_ms
    time.sleep(ticks)  # the fault's own length
    proxy.reply_delay_ms = 0


def judge(server: RedisServer, app: InProcessApp) -> None:
    entries = queued(server)
    counts = collections.Counter(entries)
    doubled = [key for key, n in counts.items() if n > 1]
    assert doubled == [], f"{len(doubled)} ticks queued twice: {doubled[:5]}"
    assert len(set(e[1] for e in entries)) >= 4, "too few ticks to judge"
    assert app.duplicates() == []


@pytest.mark.parametrize("retry", [True, False], ids=["redis-py-retry", "no-retry"])
def test_a_slow_broker_redis_never_gets_a_tick_twice_when_it_holds_the_lease(
    redis_server: RedisServer, retry: bool
) -> None:
    """Given the lease on the broker's own Redis (the default), the claim
    script enqueues granted messages in the same atomic step, and a retried
    script returns its first run's answers without pushing again."""
    with Proxy(redis_server.port) as proxy:
        broker = slow_client_broker(proxy.url, retry)
        with in_process_app(None, ACTORS, lock_ttl=4000, broker=broker) as app:
            assert app.leader.boundary.mode == Boundary.IN_CLAIM
            slow_at_ticks(proxy, app, delay_ms=700, ticks=3)
            mark = len(app.sent())
            wait_for(lambda: len(app.sent()) >= mark + 3 * len(ACTORS), timeout=20, what="ticks after the fault")
            judge(redis_server, app)
            # Every tick the ledger recorded as fired is in the queue.
            fired = {
                f["message_id"]
                for _, f in redis_server.client().xrange(app.keys.history)
                if f["outcome"] in ("fired", "caught_up")
            }
            in_queue = set(redis_server.client().lrange("dramatiq:default", 0, -1))
            assert fired <= in_queue


@pytest.mark.parametrize("retry", [True, False], ids=["redis-py-retry", "no-retry"])
def test_a_slow_broker_redis_never_gets_a_tick_twice_when_the_lease_lives_elsewhere(
    redis_server: RedisServer, retry: bool
) -> None:
    """Given the lease on another Redis, each push is idempotent: a second
    push of the same tick, from redis-py's retry or from the scheduler's
    own retry of an owed tick, finds the tick's mark and adds nothing."""
    with RedisServer() as broker_redis, Proxy(broker_redis.port) as proxy:
        broker = slow_client_broker(proxy.url, retry)
        with in_process_app(redis_server.url, ACTORS, lock_ttl=4000, broker=broker) as app:
            assert app.leader.boundary.mode == Boundary.IDEMPOTENT
            slow_at_ticks(proxy, app, delay_ms=700, ticks=3)
            mark = len(app.sent())
            wait_for(lambda: len(app.sent()) >= mark + 3 * len(ACTORS), timeout=20, what="ticks after the fault")
            judge(broker_redis, app)


def test_pushes_to_a_broker_redis_that_lost_its_scripts_are_sent_again_once(redis_server: RedisServer) -> None:
    """Given the lease on another Redis (the pushes go by EVALSHA, with no
    ``SCRIPT EXISTS`` round trip first), when the broker's Redis forgets
    its scripts (``SCRIPT FLUSH``, as after a restart) between two rounds,
    then the next pushes load the script and go through: every tick in the
    queue once, none owed."""
    from dramatiq import Message

    from dramatiq_cron_middleware.store.boundary import BrokerBoundary
    from dramatiq_cron_middleware.store.keys import Keys

    broker = RedisBroker(url=redis_server.url)
    boundary = BrokerBoundary(broker, Boundary.IDEMPOTENT, keys=Keys("boundary"), mark_ms=60_000)

    def messages() -> list[tuple[Message[object], int | None]]:
        return [
            (Message(queue_name="default", actor_name="job", args=(), kwargs={}, options={}), None) for _ in range(3)
        ]

    assert boundary.send(messages(), now_ms=0) == [None] * 3
    redis_server.client().script_flush()
    assert boundary.send(messages(), now_ms=0) == [None] * 3
    client = redis_server.client()
    assert client.llen("dramatiq:default") == 6
    assert len(set(client.lrange("dramatiq:default", 0, -1))) == 6
    broker.close()
