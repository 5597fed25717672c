"""The physical limit the benchmarks print beside their figures
(benchmarks/limit.py) does the work it stands for: every tick's ledger
entry, message and history entry, and leaves nothing behind.  No timing is
asserted."""

from __future__ import annotations

from benchmarks.limit import QUEUE, bare_hset, bare_reads, bare_work, round_trip_us
from dramatiq_cron_middleware.store.keys import Keys
from tests.support.redis_server import RedisServer


def test_the_limit_writes_each_tick_once_and_leaves_nothing(redis_server: RedisServer) -> None:
    client = redis_server.client()
    limit = bare_work(client, schedules=5, ticks_each=2, reps=2)
    assert (limit.ticks, limit.ledger, limit.queued, limit.history) == (10, 5, 10, 10)
    assert limit.seconds > 0
    assert client.dbsize() == 0, "the limit's keys were left in Redis"
    stats = client.info("commandstats")
    # One XADD per tick, one HSET of bodies, one RPUSH and one ledger HSET
    # per batch, each repetition.
    assert stats["cmdstat_xadd"]["calls"] == 2 * 10
    assert stats["cmdstat_rpush"]["calls"] == 2
    assert stats["cmdstat_hset"]["calls"] == 2 * 2
    assert not client.exists(QUEUE)
    client.close()


def test_the_limit_splits_ticks_into_the_leaders_batches(redis_server: RedisServer) -> None:
    client = redis_server.client()
    limit = bare_work(client, schedules=1001, ticks_each=1)
    assert (limit.ticks, limit.ledger, limit.queued) == (1001, 1001, 1001)
    assert client.info("commandstats")["cmdstat_evalsha"]["calls"] >= 2  # 1,000 and 1
    client.close()


def test_the_takeover_limit_reads_every_stored_definition(redis_server: RedisServer) -> None:
    client = redis_server.client()
    keys = Keys("dramatiq-cron")
    client.hset(keys.runtime, mapping={f"job:tenant-{n}": "{}" for n in range(2500)})
    limit = bare_reads(client, keys, reps=1)
    assert limit.ticks == 2500
    assert client.info("commandstats")["cmdstat_hmget"]["calls"] == 2  # one chunk: ledger and shapes
    client.close()


def test_the_round_trip_and_bulk_limits_run_their_commands(redis_server: RedisServer) -> None:
    client = redis_server.client()
    assert round_trip_us(client, (("SET", f"k{n}", "v", "NX") for n in range(10))) > 0
    assert client.dbsize() == 10
    assert bare_hset(client, "limit", ((f"f{n}", "v") for n in range(2500))) > 0
    assert client.info("commandstats")["cmdstat_hset"]["calls"] == 3  # 1,000 fields to an HSET
    assert not client.exists("limit")
    client.close()
