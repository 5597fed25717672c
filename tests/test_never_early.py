"""No tick is granted before its instant, and a ledger written under a
stepped clock does not silence a schedule once the step is undone."""

from __future__ import annotations

import os

from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import ClaimResult, SyncCode
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Lease
from dramatiq_cron_middleware.store.ledger import Claim, Ledger
from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def server_ms(server: RedisServer) -> int:
    seconds, micros = server.client().time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_the_claim_script_grants_no_tick_after_the_server_time(redis_server: RedisServer) -> None:
    """Given a leader whose clock runs ahead of Redis (a reply delayed by a
    stall pushed it forward), when it claims a tick two seconds after the
    server's now, then Redis answers NOT_YET and records nothing; once the
    server's time has passed the tick, the same claim fires."""
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=2000)
    keys = Keys("t")
    clock = ServerClock()
    lease = Lease(client=client, blocking_client=blocking, keys=keys, ttl_ms=5000, clock=clock)
    ledger = Ledger(client=client, keys=keys, clock=clock)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    sid = "job/early@UTC"
    base = ledger.sync(lease.token, acquired.epoch, [sid], now_ms=server_ms(redis_server) - 60_000).ticks[sid]
    tick = server_ms(redis_server) + 2000
    claim = Claim(schedule_id=sid, tick_ms=tick, outcome="fired", fire=True, actor_name="job", message_id="m")
    assert ledger.claim(lease.token, acquired.epoch, "b1", [claim]).results == [ClaimResult.NOT_YET]
    assert redis_server.client().hget(keys.ticks, sid) == f"{base}:{acquired.epoch}:baseline"
    assert redis_server.client().xlen(keys.history) == 0
    wait_for(lambda: server_ms(redis_server) > tick, timeout=30, what="the tick to pass")
    assert lease.renew()
    assert ledger.claim(lease.token, acquired.epoch, "b2", [claim]).results == [ClaimResult.FIRE]


def test_a_ledger_entry_lying_in_the_future_is_rebased_and_the_schedule_fires_again(
    redis_server: RedisServer,
) -> None:
    """Given a per-second schedule whose ledger entry lies an hour ahead (the
    Redis clock was stepped forward an hour while it fired, then corrected),
    when a leader starts, then it reports the entry once, records a
    ``rebased`` outcome, and the schedule fires on time again instead of
    staying silent for an hour."""
    client = redis_server.client()
    with in_process_app(redis_server.url, {"ticker": "* * * * * *", "other": "* * * * * *"}, start=False) as app:
        ticker = next(s for s in app.middleware.all_schedules() if s.actor_name == "ticker")
        client.hset(app.keys.ticks, ticker.id, f"{server_ms(redis_server) + 3_600_000}:1:1")
        client.set(app.keys.epoch, 1)
        app.middleware.start(app.broker)
        wait_for(lambda: len(app.sent("ticker")) >= 3, timeout=60, what="the rebased schedule to fire")
        assert len(app.warnings("lay in the future")) == 1
        outcomes = [
            fields["outcome"] for _, fields in client.xrange(app.keys.history) if fields["schedule"] == ticker.id
        ]
        assert "rebased" in outcomes
        assert app.duplicates() == []


def test_sync_reports_a_future_entry_and_baselines_it_at_the_server_now(redis_server: RedisServer) -> None:
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=2000)
    keys = Keys("t")
    clock = ServerClock()
    lease = Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=5000,
        clock=clock,
        candidate=Candidate("h", os.getpid()),
    )
    ledger = Ledger(client=client, keys=keys, clock=clock)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    ahead = server_ms(redis_server) + 3_600_000
    redis_server.client().hset(keys.ticks, "a", f"{ahead}:1:1")
    before = server_ms(redis_server)
    reply = ledger.sync(lease.token, acquired.epoch, ["a"])
    assert reply.codes["a"] == SyncCode.FUTURE
    assert before <= reply.ticks["a"] <= server_ms(redis_server)
    assert redis_server.client().hget(keys.ticks, "a") == f"{reply.ticks['a']}:{acquired.epoch}:baseline"
