"""What durable claims cost: claim latency with and without ``WAIT``.

Run: ``.venv/bin/python -m benchmarks.durable [--rounds 200] [--batch-rounds 30]``

Starts a master and one replica (redis-server on loopback) and times, from
the leader's side, one claim of 1 tick and one claim of 1,000 ticks (1,000
schedules due at once), each as the leader makes it with a RedisBroker on
the same Redis:

- ``off`` (``replicas=0``): the claim script enqueues the messages itself
  (in-claim boundary), one round trip;
- ``on`` (``replicas=1``): the claim script stages the messages in the
  outbox, ``WAIT 1`` follows in the same pipeline, then, once confirmed,
  the publish script pushes them (one more round trip).

Prints p50 and p99 in milliseconds per case.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.measure import percentiles
from dramatiq_cron_middleware.schedules.planner import message_for
from dramatiq_cron_middleware.schedules.schedule import Schedule, bind_schedule
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.durability import Durability
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Lease
from dramatiq_cron_middleware.store.ledger import Claim, Ledger
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def measure(master: RedisServer, *, replicas: int, size: int, rounds: int) -> dict[str, float]:
    """Claim ``size`` ticks ``rounds`` times; latency percentiles in ms."""
    keys = Keys(f"bench-{uuid.uuid4().hex[:6]}")
    client, blocking = scheduler_clients(master.url, op_timeout_ms=2000, block_timeout_ms=15_000)
    clock = ServerClock()
    durability = Durability(replicas=replicas, wait_ms=1000)
    lease = Lease(
        client=client,
        blocking_client=blocking,
        keys=keys,
        ttl_ms=600_000,
        clock=clock,
        candidate=Candidate("bench", os.getpid()),
        durability=durability,
    )
    ledger = Ledger(client=client, keys=keys, clock=clock, durability=durability)
    broker = RedisBroker(url=master.url)
    dramatiq.actor(lambda: None, actor_name="job", broker=broker)
    boundary = BrokerBoundary(broker, Boundary.IN_CLAIM, keys=keys, mark_ms=900_000)
    schedules = [
        bind_schedule(
            "job",
            "default",
            Schedule("* * * * * *", name=f"s{i}"),
            timezone="UTC",
            catch_up="each",
            catch_up_window=3_600_000,
        )
        for i in range(size)
    ]
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token is not None
    base = clock.now_ms() // 1000 * 1000 - (rounds + 10) * 1000
    ledger.sync(lease.token, acquired.epoch, [s.id for s in schedules], now_ms=base)
    out: list[float] = []
    for r in range(rounds):
        tick = base + (r + 1) * 1000
        messages = [message_for(s, tick, prefix=keys.prefix) for s in schedules]
        claims = [
            Claim(schedule_id=s.id, tick_ms=tick, outcome="fired", fire=True, actor_name="job", message_id=m.message_id)
            for s, m in zip(schedules, messages, strict=True)
        ]
        payloads: list[Any] = [boundary.payload(m, None, now_ms=tick) for m in messages]
        started = time.perf_counter()
        reply = ledger.claim(lease.token, acquired.epoch, uuid.uuid4().hex, claims, payloads)
        if ledger.stages:
            assert all(ledger.publish(payloads))
        out.append((time.perf_counter() - started) * 1000)
        assert all(int(r) == 1 for r in reply.results), reply.results[:3]
    broker.close()
    client.close()
    blocking.close()
    return percentiles(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.durable", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="claims of 1 tick per case (default 200)")
    parser.add_argument("--batch-rounds", type=int, default=30, help="claims of 1,000 ticks per case (default 30)")
    args = parser.parse_args(argv)
    with RedisServer() as master, RedisServer(extra=["--replicaof", "127.0.0.1", str(master.port)]) as replica:
        probe = replica.client()
        wait_for(lambda: probe.info("replication").get("master_link_status") == "up", timeout=10, what="the replica")
        print("| case | durable | n | p50 ms | p99 ms | max ms |")
        print("| --- | --- | --- | --- | --- | --- |")
        for size, rounds in ((1, args.rounds), (1000, args.batch_rounds)):
            for replicas in (0, 1):
                p = measure(master, replicas=replicas, size=size, rounds=rounds)
                label = "on (`replicas=1`)" if replicas else "off (`replicas=0`)"
                print(f"| {size} tick(s) | {label} | {p['n']} | {p['p50']} | {p['p99']} | {p['max']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
