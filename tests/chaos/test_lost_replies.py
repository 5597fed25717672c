"""Faults that lose a reply while the command still runs in Redis.

Found by the chaos suite (redis_sigstop, redis_debug_sleep): an acquire
sent while Redis was stalled ran once Redis resumed, but its reply had
timed out, so the candidate retried with a fresh token, found the lease
held by its own lost attempt, and waited a whole lease for itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Lease
from tests.support.instances import wait_for
from tests.support.proxy import Proxy
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.chaos

TTL_MS = 2000


@pytest.fixture
def proxied(redis_server: RedisServer) -> Iterator[Proxy]:
    """A proxy in front of the test's redis-server."""
    with Proxy(redis_server.port, max_lifetime=120) as proxy:
        yield proxy


def make_lease(url: str, keys: Keys) -> Lease:
    client, blocking = scheduler_clients(url, op_timeout_ms=150, block_timeout_ms=TTL_MS)
    return Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=TTL_MS,
        clock=ServerClock(),
        candidate=Candidate("test", os.getpid()),
    )


def test_an_acquire_whose_reply_was_lost_is_recognised_at_the_next_attempt(
    redis_server: RedisServer, proxied: Proxy
) -> None:
    """Given a candidate whose acquire times out although Redis ran it,
    when the network heals and it tries again, then it finds the lease its
    lost attempt won (same epoch) instead of waiting a lease for it."""
    keys = Keys("ghost")
    lease = make_lease(proxied.url, keys)
    direct = redis_server.client()
    # Lead once and step down, so Redis knows the script (EVALSHA) as it
    # does in a running cluster.
    assert isinstance(lease.acquire(), Acquired)
    assert lease.release()
    proxied.set_delay(400)  # beyond the 150 ms timeout: the reply is lost
    with pytest.raises(redis.TimeoutError):
        lease.acquire()
    won = wait_for(lambda: direct.hget(keys.lease, "token"), timeout=60, what="the lost acquire to run")
    proxied.heal()
    result = lease.acquire()
    assert isinstance(result, Acquired), f"waited for its own lost attempt: {result}"
    assert result.epoch == int(direct.hget(keys.lease, "epoch") or 0)
    assert lease.token == won
    assert lease.release()
    direct.close()
