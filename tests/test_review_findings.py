"""Findings of an adversarial review of the core, each pinned as the
guarantee it breaks, against a real redis-server where Redis is involved."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.brokers.stub import StubBroker
from dramatiq.errors import ConnectionClosed

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.errors import CronConfigurationError
from dramatiq_cron_middleware.schedules.planner import plan
from dramatiq_cron_middleware.schedules.schedule import Schedule, schedules_for_actor
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import ClaimResult
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Lease
from dramatiq_cron_middleware.store.ledger import Claim, Ledger
from tests.support.instances import wait_for
from tests.support.proxy import Proxy
from tests.support.redis_server import RedisServer

FIRE = ClaimResult.FIRE


#: Ledger baselines ten minutes back, so ticks after them lie in the past
#: (the claim script grants no tick after the server's time).
PAST = int(time.time() * 1000) - 600_000
TTL = 2000
SID = "s/x@UTC"


def make(url: str, *, op_timeout_ms: int = 500, prefix: str = "t") -> tuple[Lease, Ledger]:
    client, blocking = scheduler_clients(url, op_timeout_ms=op_timeout_ms, block_timeout_ms=TTL)
    clock = ServerClock()
    keys = Keys(prefix)
    lease = Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=TTL,
        clock=clock,
        candidate=Candidate("h", os.getpid()),
    )
    return lease, Ledger(client=client, keys=keys, clock=clock)


def fire(sid: str, tick: int) -> Claim:
    return Claim(schedule_id=sid, tick_ms=tick, outcome="caught_up", fire=True, message_id=f"m-{tick}")


def lead(lease: Lease, ledger: Ledger) -> tuple[str, int, int]:
    """Acquire and sync; returns (token, epoch, the schedule's baseline)."""
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    base = ledger.sync(lease.token, acquired.epoch, [SID], now_ms=PAST).ticks[SID]
    return lease.token, acquired.epoch, base


def evalsha_calls(server: RedisServer) -> int:
    stats = server.client().info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


# -- lost ticks ---------------------------------------------------------------


def test_a_retried_catch_up_claim_grants_every_tick_its_first_run_granted(redis_server: RedisServer) -> None:
    """The scheduler's clients retry a timed-out command once (Retry(NoBackoff(), 1)).
    Given a catch-up batch of three ticks of one schedule that ran in Redis
    but whose reply was lost, when redis-py resends the very same EVALSHA,
    then the reply (and the stored batch record _settle reads) must still
    grant all three ticks.  Today the retry answers REFUSED for every tick
    but the newest and overwrites the batch record: two ticks are recorded
    as fired and never enqueued."""
    lease, ledger = make(redis_server.url)
    token, epoch, base = lead(lease, ledger)
    claims = [fire(SID, base + 1000), fire(SID, base + 2000), fire(SID, base + 3000)]
    first = ledger.claim(token, epoch, "batch-1", claims).results
    assert first == [FIRE, FIRE, FIRE]
    retried = ledger.claim(token, epoch, "batch-1", claims).results  # exactly what Retry resends
    assert retried == first, f"the retry of a batch that already ran answered {retried}"
    assert ledger.settle("batch-1").results == first


def test_a_batch_settled_as_never_run_cannot_be_granted_afterwards(redis_server: RedisServer) -> None:
    """Given a claim that times out (call and retry) while the network
    holds its bytes, when the leader settles
    the batch and finds no record (so recomputes those ticks as never
    claimed), then the delayed attempts that reach Redis later must not
    grant the tick: nobody would enqueue it, and the ledger would refuse it
    to everyone else."""
    direct_lease, direct_ledger = make(redis_server.url)
    token, epoch, base = lead(direct_lease, direct_ledger)
    with Proxy(redis_server.port, max_lifetime=60) as proxy:
        _, slow_ledger = make(proxy.url, op_timeout_ms=150)
        # One claim through the proxy first, so the script is cached (EVALSHA).
        assert slow_ledger.claim(token, epoch, "warm", [fire(SID, base + 1000)]).results == [FIRE]
        proxy.set_delay(1500)
        with pytest.raises(redis.TimeoutError):
            slow_ledger.claim(token, epoch, "lost", [fire(SID, base + 2000)])
        # What LeaderThread._settle does next, before the held bytes arrive.
        assert direct_ledger.settle("lost").results is None
        settled_at = evalsha_calls(redis_server)
        # The first attempt's bytes were held by the network and reach
        # Redis now.  (redis-py's retry opens a new connection whose
        # handshake also stalls, so it may never send the claim at all.)
        wait_for(
            lambda: evalsha_calls(redis_server) > settled_at,
            timeout=60,
            what="the delayed claim to reach Redis",
        )
    entry = redis_server.client().hget(Keys("t").ticks, SID) or ""
    assert entry.split(":")[0] == str(base + 1000), (
        f"a batch the leader settled as never run was granted later: ledger entry {entry!r}"
    )
    assert direct_ledger.settle("lost").results is None


def test_an_on_time_tick_fires_even_with_a_zero_catch_up_window() -> None:
    """catch_up_window=0 is accepted and reads as "no catch-up".  A tick
    the leader reaches 5 ms after it fell due is on time (ON_TIME_MS), not
    catch-up, so it must fire; today it is recorded as missed, so such a
    schedule never fires at all."""
    [schedule] = schedules_for_actor(
        "job",
        "default",
        Schedule("* * * * *", catch_up_window=0),
        timezone="UTC",
        catch_up="each",
        catch_up_window=300_000,
    )
    tick = 1_700_000_040_000  # a whole minute
    decided = [(d.tick_ms, d.fire) for d in plan(schedule, tick - 60_000, tick + 5)]
    assert decided == [(tick, True)], decided


class FlakyBroker(StubBroker):
    """A stub broker whose enqueues fail while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True
        self.attempts = 0
        self.enqueued: set[str] = set()

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        self.attempts += 1
        if self.failing:
            raise ConnectionClosed(OSError("broker down"))
        result = super().enqueue(message, delay=delay)
        self.enqueued.add(message.message_id)
        return result


@pytest.fixture
def flaky_app(redis_server: RedisServer) -> Iterator[tuple[FlakyBroker, CronMiddleware]]:
    broker = FlakyBroker()
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=3000)
    broker.add_middleware(middleware)

    @dramatiq.actor(broker=broker, cron="* * * * * *")
    def every_second() -> None:
        pass

    yield broker, middleware
    middleware.stop()
    broker.close()


def test_a_granted_tick_whose_enqueue_failed_is_still_enqueued_after_losing_the_lease(
    flaky_app: tuple[FlakyBroker, CronMiddleware], redis_server: RedisServer
) -> None:
    """docs/design.md: a failed enqueue is retried with the same message id
    "even after the lease is lost: the tick is this process's alone".
    Given a leader whose enqueues fail, when another candidate takes the
    lease and keeps it and the broker recovers, then every tick Redis
    granted to that leader is enqueued.  Today a follower only blocks on
    BLPOP and never retries its owed ticks while someone else leads."""
    broker, middleware = flaky_app
    keys = Keys("dramatiq-cron")
    direct = redis_server.client()
    middleware.start(broker)
    leader = middleware.leader
    assert leader is not None
    wait_for(lambda: broker.attempts >= 1, timeout=60, what="a failed enqueue of a granted tick")
    epoch = leader.epoch
    assert epoch is not None

    # Another candidate now holds the lease (one atomic write) and keeps it.
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=3000)
    other = Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=3000,
        clock=ServerClock(),
        candidate=Candidate("other", 1),
    )
    other.token = "other-token"
    direct.hset(keys.lease, "token", "other-token")

    def other_keeps_leading() -> bool:
        assert other.renew()
        return not leader.leading

    wait_for(other_keeps_leading, timeout=60, interval=0.2, what="the leader to step down")
    broker.failing = False
    granted = {
        fields["message_id"]
        for _, fields in direct.xrange(keys.history)
        if fields["epoch"] == str(epoch) and fields["outcome"] in ("fired", "caught_up")
    }
    assert granted

    def owed_ticks_paid() -> bool:
        assert other.renew()
        return granted <= broker.enqueued

    wait_for(owed_ticks_paid, timeout=30, interval=0.2, what=f"the {len(granted)} granted ticks to be enqueued")
    other.release()
    direct.close()


# -- leaked credentials -------------------------------------------------------


def test_a_password_containing_at_never_reaches_an_error_message() -> None:
    """redis-py accepts an unencoded '@' in the password (the host starts
    after the last '@'); redaction must hide all of it, not just the part
    before the first '@'."""
    url = "redis://user:s3cr@t-pw@localhost:notaport/0"
    with pytest.raises(CronConfigurationError) as error:
        scheduler_clients(url, op_timeout_ms=100, block_timeout_ms=100)
    message = str(error.value)
    assert "s3cr" not in message and "t-pw" not in message, message
