"""The lease listener the hand-over tests rely on
(tests/support/lease_events.py) sees every event after it returns,
however it was made."""

from __future__ import annotations

import gc

import pytest

from tests.support.lease_events import LEASE, lease_events, lease_gone
from tests.support.redis_server import RedisServer


def test_a_listener_made_from_a_client_nobody_keeps_still_sees_the_release(redis_server: RedisServer) -> None:
    """Given a listener made from ``redis_server.client()`` (a client that
    is collected at once), when the lease is deleted, then the listener
    reports "del".  (redis-py closed the collected client's pool and the
    subscription with it; the next read subscribed again and the release
    in between was lost: the flaky test_gevent.py.)"""
    listener = lease_events(redis_server.client())
    gc.collect()
    client = redis_server.client()
    # Redis counts the subscription before anything happens to the key.
    assert client.pubsub_numsub(f"__keyspace@0__:{LEASE}") == [(f"__keyspace@0__:{LEASE}", 1)]
    client.hset(LEASE, "token", "t")
    client.delete(LEASE)
    assert lease_gone(listener, timeout=30) == "del"
    listener.close()


def test_a_listener_that_lost_its_subscription_says_so(redis_server: RedisServer) -> None:
    """Given a listener whose connection is dropped (events in the gap are
    lost), when it reads again, then it fails naming the cause instead of
    waiting for an event it may have missed."""
    listener = lease_events(redis_server.client())
    redis_server.client().client_kill_filter(_type="pubsub")
    with pytest.raises(AssertionError, match="subscription was dropped"):
        lease_gone(listener, timeout=30)
    listener.close()
