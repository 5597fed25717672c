"""Takeover after a crash is bounded by the lease on the follower's own
monotonic clock, whatever the Redis clock (and so the key's PTTL) says."""

from __future__ import annotations

import time

import pytest

from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def test_a_lease_nobody_renews_is_taken_over_within_a_lease_even_with_a_long_pttl(
    redis_server: RedisServer,
) -> None:
    """Given a lease left by a leader killed with -9 right after the Redis
    clock stepped 40 s back (so the key's PTTL reads 41 s for a 1 s lease),
    when a follower starts, then it deposes the unrenewed lease (one
    WARNING) and leads long before the key would expire: the wait is on its
    own clock, not the 41 s PTTL.  (The old follower trusted the PTTL.)"""
    client = redis_server.client()
    with in_process_app(redis_server.url, {"job": "* * * * * *"}, lock_ttl=1000, start=False) as app:
        client.hset(app.keys.lease, mapping={"token": "dead-leader", "epoch": 7, "seq": 3, "ttl": 1000})
        client.set(app.keys.epoch, 7)
        client.pexpire(app.keys.lease, 41_000)
        app.middleware.start(app.broker)
        wait_for(lambda: app.leader.leading, timeout=30, interval=0.01, what="the follower to lead")
        assert client.hget(app.keys.lease, "token") not in (None, "dead-leader")  # within the 41 s: deposed
        assert len(app.warnings("was not renewed")) == 1
        wait_for(lambda: len(app.sent()) >= 1, timeout=30, what="a fire")


@pytest.mark.slow
def test_a_lease_that_is_renewed_is_never_deposed(redis_server: RedisServer) -> None:
    """The other side: a live leader renewing its lease (its renewal count
    moves) is never deposed, however long the follower watches.  (A 3 s
    lease renewed every 0.2 s, watched for two leases: a stall of this
    process shorter than the lease cannot make the renewals look stopped.)"""
    client = redis_server.client()
    with in_process_app(redis_server.url, {"job": "* * * * * *"}, lock_ttl=3000, start=False) as app:
        client.hset(app.keys.lease, mapping={"token": "live-leader", "epoch": 3, "seq": 1, "ttl": 3000})
        client.pexpire(app.keys.lease, 3000)
        app.middleware.start(app.broker)
        deadline = time.monotonic() + 6.5
        while time.monotonic() < deadline:
            client.hincrby(app.keys.lease, "seq", 1)
            client.pexpire(app.keys.lease, 3000)
            assert client.hget(app.keys.lease, "token") == "live-leader"
            time.sleep(0.2)  # the live leader's renewal interval
        assert not app.leader.leading
        assert app.sent() == []
