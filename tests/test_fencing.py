"""The fencing argument, pinned directly against a real Redis: a claim is
granted only to the token the lease holds, once per tick, and a lost reply
can be settled without firing twice."""

from __future__ import annotations

import os
import time

import pytest

from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import ClaimResult, parse_ledger_value, whole_actor
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Held, Lease
from dramatiq_cron_middleware.store.ledger import Claim, Ledger, NotLeader
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

FIRE, PAUSED, RECORDED, REFUSED = ClaimResult.FIRE, ClaimResult.PAUSED, ClaimResult.RECORDED, ClaimResult.REFUSED


#: Ledger baselines ten minutes back, so ticks after them lie in the past
#: (the claim script grants no tick after the server's time).
PAST = int(time.time() * 1000) - 600_000
TTL = 2000


def make(server: RedisServer, name: str = "a", prefix: str = "t") -> tuple[Lease, Ledger]:
    client, blocking = scheduler_clients(server.url, op_timeout_ms=500, block_timeout_ms=TTL)
    clock = ServerClock()
    keys = Keys(prefix)
    lease = Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=TTL,
        clock=clock,
        candidate=Candidate(name, os.getpid()),
    )
    return lease, Ledger(client=client, keys=keys, clock=clock)


def server_ms(server: RedisServer) -> int:
    seconds, micros = server.client().time()
    return int(seconds) * 1000 + int(micros) // 1000


def fire(sid: str, tick: int) -> Claim:
    return Claim(
        schedule_id=sid, tick_ms=tick, outcome="fired", fire=True, actor_name=sid.split("/")[0], message_id=f"m-{tick}"
    )


def test_only_one_candidate_acquires_a_free_lease(redis_server: RedisServer) -> None:
    a, _ = make(redis_server, "a")
    b, _ = make(redis_server, "b")
    first = a.acquire()
    second = b.acquire()
    assert isinstance(first, Acquired)
    assert isinstance(second, Held)
    assert 0 < second.remaining_ms <= TTL


def test_a_deposed_leader_is_refused_by_redis_not_by_its_own_belief(redis_server: RedisServer) -> None:
    """Given a leader whose lease key was deleted and taken by another
    candidate, when the old leader (still believing it leads) claims a tick,
    then Redis refuses it and only the new leader's claim is granted."""
    old, old_ledger = make(redis_server, "old")
    new, new_ledger = make(redis_server, "new")
    acquired = old.acquire()
    assert isinstance(acquired, Acquired)
    assert old.token is not None
    old_ledger.sync(old.token, acquired.epoch, ["s/x@UTC"], now_ms=PAST)
    stale_token = old.token

    redis_server.client().delete(Keys("t").lease)
    taken = new.acquire()
    assert isinstance(taken, Acquired) and taken.epoch == acquired.epoch + 1
    assert new.token is not None

    baseline = new_ledger.sync(new.token, taken.epoch, ["s/x@UTC"], now_ms=PAST).ticks["s/x@UTC"]
    with pytest.raises(NotLeader):
        old_ledger.claim(stale_token, acquired.epoch, "b1", [fire("s/x@UTC", baseline + 1000)])
    assert new_ledger.claim(new.token, taken.epoch, "b2", [fire("s/x@UTC", baseline + 1000)]).results == [FIRE]
    assert old.renew() is None


def test_each_tick_is_granted_once_and_never_older_than_the_last(redis_server: RedisServer) -> None:
    lease, ledger = make(redis_server)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    base = ledger.sync(lease.token, acquired.epoch, ["s/x@UTC"], now_ms=PAST).ticks["s/x@UTC"]
    assert ledger.claim(lease.token, acquired.epoch, "b1", [fire("s/x@UTC", base + 1000)]).results == [FIRE]
    # The same epoch asking again for the same tick (a retry after a lost
    # reply) gets the same answer; an older tick is refused.
    assert ledger.claim(lease.token, acquired.epoch, "b2", [fire("s/x@UTC", base + 1000)]).results == [FIRE]
    assert ledger.claim(lease.token, acquired.epoch, "b3", [fire("s/x@UTC", base)]).results == [REFUSED]


def test_a_tick_granted_to_one_epoch_is_refused_to_the_next(redis_server: RedisServer) -> None:
    """Given epoch 1 claimed tick T and lost the lease, when epoch 2 asks
    for the same T (it never saw epoch 1's claim), then it is refused."""
    a, a_ledger = make(redis_server, "a")
    b, b_ledger = make(redis_server, "b")
    first = a.acquire()
    assert isinstance(first, Acquired) and a.token
    base = a_ledger.sync(a.token, first.epoch, ["s/x@UTC"], now_ms=PAST).ticks["s/x@UTC"]
    assert a_ledger.claim(a.token, first.epoch, "b1", [fire("s/x@UTC", base + 1000)]).results == [FIRE]
    a.release()
    second = b.acquire()
    assert isinstance(second, Acquired) and b.token
    assert b_ledger.claim(b.token, second.epoch, "b2", [fire("s/x@UTC", base + 1000)]).results == [REFUSED]
    assert b_ledger.claim(b.token, second.epoch, "b3", [fire("s/x@UTC", base + 2000)]).results == [FIRE]


def test_a_lost_claim_reply_is_settled_from_the_batch_record(redis_server: RedisServer) -> None:
    lease, ledger = make(redis_server)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    base = ledger.sync(lease.token, acquired.epoch, ["s/x@UTC", "s/y@UTC"], now_ms=PAST).ticks["s/x@UTC"]
    claims = [fire("s/x@UTC", base + 1000), Claim("s/y@UTC", base + 1000, "missed", fire=False)]
    assert ledger.claim(lease.token, acquired.epoch, "batch-1", claims).results == [FIRE, RECORDED]
    assert ledger.settle("batch-1").results == [FIRE, RECORDED]
    assert ledger.settle("never-sent").results is None


def test_a_wiped_ledger_baselines_at_now_so_old_ticks_never_fire(redis_server: RedisServer) -> None:
    """Given a ledger that vanished (FLUSHALL, restart without persistence),
    when a leader syncs, then the schedule restarts from the server's now
    and a tick from before that instant is refused."""
    lease, ledger = make(redis_server)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    first = ledger.sync(lease.token, acquired.epoch, ["s/x@UTC"]).ticks["s/x@UTC"]
    fired = first + 10
    wait_for(lambda: server_ms(redis_server) > fired, timeout=30, what="the tick to be in the past")
    assert ledger.claim(lease.token, acquired.epoch, "b1", [fire("s/x@UTC", fired)]).results == [FIRE]
    redis_server.client().delete(Keys("t").ticks)
    reply = ledger.sync(lease.token, acquired.epoch, ["s/x@UTC"])
    entry = parse_ledger_value(redis_server.client().hget(Keys("t").ticks, "s/x@UTC"))
    assert entry is not None and entry.baseline and entry.tick_ms == reply.ticks["s/x@UTC"] > fired
    assert ledger.claim(lease.token, acquired.epoch, "b2", [fire("s/x@UTC", fired)]).results == [REFUSED]


def test_a_paused_actor_records_its_ticks_as_paused(redis_server: RedisServer) -> None:
    """The whole actor is paused by ``job:*``; ``job`` alone is the id of
    its unnamed schedule and pauses no other schedule of it."""
    lease, ledger = make(redis_server)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    base = ledger.sync(lease.token, acquired.epoch, ["job/x@UTC"], now_ms=PAST).ticks["job/x@UTC"]
    redis_server.client().sadd(Keys("t").paused, "job")
    assert ledger.claim(lease.token, acquired.epoch, "b1", [fire("job/x@UTC", base + 1000)]).results == [FIRE]
    redis_server.client().sadd(Keys("t").paused, whole_actor("job"))
    assert ledger.claim(lease.token, acquired.epoch, "b2", [fire("job/x@UTC", base + 2000)]).results == [PAUSED]
    entries = redis_server.client().xrange(Keys("t").history)
    assert [e[1]["outcome"] for e in entries] == ["fired", "paused"]


def test_release_is_compare_and_delete(redis_server: RedisServer) -> None:
    a, _ = make(redis_server, "a")
    b, _ = make(redis_server, "b")
    assert isinstance(a.acquire(), Acquired)
    redis_server.client().delete(Keys("t").lease)
    assert isinstance(b.acquire(), Acquired)
    assert a.release() is False  # must not delete b's lease
    assert redis_server.client().hget(Keys("t").lease, "host") == "b"


def test_a_graceful_release_wakes_a_waiting_follower(redis_server: RedisServer) -> None:
    import threading
    import time

    a, _ = make(redis_server, "a")
    b, _ = make(redis_server, "b")
    assert isinstance(a.acquire(), Acquired)
    assert isinstance(b.acquire(), Held)
    woke: list[float] = []

    def follow() -> None:
        b.wait_for_release(TTL)
        woke.append(time.monotonic())

    thread = threading.Thread(target=follow)
    thread.start()
    time.sleep(0.2)  # let the follower block; correctness does not depend on it
    released_at = time.monotonic()
    assert a.release() is True
    thread.join(5)
    assert woke, "follower never woke"
    # Woken by the push, not by the TTL running out.
    assert woke[0] - released_at < TTL / 2000
    assert isinstance(b.acquire(), Acquired)


def test_renewal_does_not_stretch_the_lease(redis_server: RedisServer) -> None:
    a, _ = make(redis_server)
    assert isinstance(a.acquire(), Acquired)
    for _ in range(5):
        assert a.renew()
    assert redis_server.client().pttl(Keys("t").lease) <= TTL


def test_epochs_stay_unique_when_the_epoch_counter_vanishes(redis_server: RedisServer) -> None:
    """Given a ledger entry claimed by epoch N, when the epoch counter alone
    is lost, then the next acquisition gets an epoch above N, so it can
    never be mistaken for the epoch that claimed the tick."""
    a, a_ledger = make(redis_server, "a")
    first = a.acquire()
    assert isinstance(first, Acquired) and a.token
    for _ in range(3):
        a.release()
        first = a.acquire()
        assert isinstance(first, Acquired) and a.token
    a_ledger.sync(a.token, first.epoch, ["s/x@UTC"], now_ms=PAST)
    a.release()
    redis_server.client().delete(Keys("t").epoch)
    b, _ = make(redis_server, "b")
    second = b.acquire()
    assert isinstance(second, Acquired)
    assert second.epoch_was_missing and second.epoch > first.epoch


def make_fast(server: RedisServer, name: str) -> Lease:
    import redis as redis_py

    client, blocking = scheduler_clients(server.url, op_timeout_ms=500, block_timeout_ms=TTL)
    presence = redis_py.Redis(
        connection_pool=scheduler_clients(server.url, op_timeout_ms=500, block_timeout_ms=0)[0].connection_pool,
        single_connection_client=True,
    )
    return Lease(
        client=client,
        blocking_client=blocking,
        keys=Keys("t"),
        ttl_ms=TTL,
        clock=ServerClock(),
        candidate=Candidate(name, os.getpid()),
        presence_client=presence,
    )


def test_fast_takeover_deposes_only_a_leader_whose_connection_is_gone(redis_server: RedisServer) -> None:
    """Given a leader that registered its presence connection, a follower
    leaves it alone while that connection lives, and deposes it (and only
    its token) the moment Redis no longer knows the connection."""
    leader = make_fast(redis_server, "leader")
    follower = make_fast(redis_server, "follower")
    assert isinstance(leader.acquire(), Acquired)
    assert not follower.depose_if_gone()
    conn = redis_server.client().hget(Keys("t").lease, "conn")
    assert conn and conn.isdigit()
    redis_server.client().client_kill_filter(_id=conn)
    assert follower.depose_if_gone()
    assert isinstance(follower.acquire(), Acquired)
    # The old leader, still alive, is refused from now on.
    assert leader.renew() is None


def test_without_fast_takeover_no_connection_is_registered(redis_server: RedisServer) -> None:
    a, _ = make(redis_server, "a")
    b, _ = make(redis_server, "b")
    assert isinstance(a.acquire(), Acquired)
    assert redis_server.client().hget(Keys("t").lease, "conn") == ""
    assert not b.depose_if_gone()
