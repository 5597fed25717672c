"""The fenced sync of many schedules: ids travel as one argument per chunk,
the script reads each chunk with one HMGET, chunks go out a few at a time in
a pipeline (one by one on Redis Cluster, which refuses scripts in
pipelines), and every schedule gets its own entry back, in order, whatever
mix of present, missing, corrupt and reshaped entries the ledger
holds."""

from __future__ import annotations

import random

import pytest
import redis

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.errors import CronScheduleError
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.store import ledger as ledger_module
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import SyncCode, parse_ledger_value
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Lease
from dramatiq_cron_middleware.store.ledger import SYNC_CHUNK, SYNC_WINDOW, BadRequest, Ledger, NotLeader, SyncEntry
from tests.support.redis_server import RedisServer
from tests.support.redis_topologies import ClusterGroup

PAST = 1_700_000_000_000


def lead(url: str) -> tuple[redis.Redis, Keys, Lease, Ledger, int]:
    client, blocking = scheduler_clients(url, op_timeout_ms=5000, block_timeout_ms=2000)
    keys = Keys("s")
    clock = ServerClock()
    lease = Lease(client=client, blocking_client=blocking, keys=keys, ttl_ms=30_000, clock=clock)
    ledger = Ledger(client=client, keys=keys, clock=clock)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    return client, keys, lease, ledger, acquired.epoch


def check_a_mixed_sync(url: str, count: int) -> None:
    """Given ``count`` schedules, a seeded mix of plain entries, missing
    ones, corrupt ones and changed shapes, when
    they are synced in one call, then each gets its own value back (never a
    neighbour's), the codes name exactly the ones that were not plain, and
    the ledger holds what was answered."""
    client, keys, lease, ledger, epoch = lead(url)
    rng = random.Random(count)
    entries: list[SyncEntry] = []
    expected: dict[str, int] = {}
    codes: dict[str, SyncCode] = {}
    ticks: dict[str, str] = {}
    shapes: dict[str, str] = {}
    for n in range(count):
        sid = f"job{n}/s"
        kind = rng.choice(["plain"] * 6 + ["missing", "corrupt", "reshaped"])
        tick = PAST + n * 1000
        entry = SyncEntry(sid, f"shape{n}")
        if kind == "plain":
            ticks[sid], shapes[sid] = f"{tick}:3:1", entry.shape
            expected[sid] = tick
        elif kind == "corrupt":
            ticks[sid], shapes[sid] = "garbage", entry.shape
            codes[sid] = SyncCode.CORRUPT
        elif kind == "reshaped":
            ticks[sid], shapes[sid] = f"{tick}:3:1", "an older shape"
            codes[sid] = SyncCode.RESHAPED
        else:
            codes[sid] = SyncCode.BASELINE
        entries.append(entry)
    pipe = client.pipeline(transaction=False)
    items = list(ticks.items())
    for start in range(0, len(items), 1000):
        pipe.hset(keys.ticks, mapping=dict(items[start : start + 1000]))
    items = list(shapes.items())
    for start in range(0, len(items), 1000):
        pipe.hset(keys.shapes, mapping=dict(items[start : start + 1000]))
    pipe.execute()

    reply = ledger.sync(lease.token or "", epoch, entries, now_ms=PAST + 10**9)

    assert len(reply.ticks) == count
    assert reply.codes == codes
    for sid, tick in expected.items():
        assert reply.ticks[sid] == tick, sid
    baselines = {sid for sid in codes}
    assert all(reply.ticks[sid] == reply.ticks[min(baselines)] for sid in baselines)  # one baseline, at now
    stored = client.hgetall(keys.ticks)
    for entry in entries:
        value = parse_ledger_value(stored[entry.schedule_id])
        assert value is not None and value.tick_ms == reply.ticks[entry.schedule_id]
    assert client.hgetall(keys.shapes) == {e.schedule_id: e.shape for e in entries}

    # Fenced: once the lease is another's, no chunk of the pipeline writes.
    client.hset(keys.lease, "token", "someone else")
    client.delete(keys.ticks)
    with pytest.raises(NotLeader):
        ledger.sync(lease.token or "", epoch, entries)
    assert client.exists(keys.ticks) == 0


def test_a_sync_of_many_pipelined_chunks_answers_each_schedule_its_own_entry(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More than one window of chunks, and a last chunk that is not full:
    # chunks of 250 (the windows work alike for any size, and 25,007
    # schedules cost 17 CPU-s); the cluster's test sends full-size chunks.
    monkeypatch.setattr(ledger_module, "SYNC_CHUNK", 250)
    check_a_mixed_sync(redis_server.url, 250 * SYNC_WINDOW + 250 + 7)


def test_a_sync_of_many_chunks_on_a_cluster_runs_them_one_by_one(cluster: ClusterGroup) -> None:
    check_a_mixed_sync(cluster.url(), 2 * SYNC_CHUNK + 3)


def test_an_identity_with_a_newline_is_refused_before_anything_is_sent(redis_server: RedisServer) -> None:
    """Identities travel one per line: a newline in one would shift every
    schedule after it.  Binding refuses it with the actor and the value;
    the ledger refuses a request that carries one anyway."""
    with pytest.raises(CronScheduleError, match=r"name must be .*'bad\\nname'"):
        bind_schedule(
            "job",
            "default",
            Schedule("* * * * *", name="bad\nname"),
            timezone="UTC",
            catch_up="each",
            catch_up_window=0,
        )
    with pytest.raises(CronScheduleError, match="control characters"):
        bind_schedule("job\n2", "default", "* * * * *", timezone="UTC", catch_up="each", catch_up_window=0)
    client, keys, lease, ledger, epoch = lead(redis_server.url)
    with pytest.raises(BadRequest, match="newline"):
        ledger.sync(lease.token or "", epoch, ["a", "b\nc", "d"])
    assert client.exists(keys.ticks) == 0
