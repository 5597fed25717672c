"""Catch-up throughput after an outage, on a RedisBroker, while the leader
keeps its lease, beside its physical limit.

Run: ``.venv/bin/python -m benchmarks.catch_up [--schedules 300] [--backlog-s 300] [--runs 3]``

Starts a lease redis-server and a broker redis-server on free loopback
ports, declares per-second schedules whose ledger entries are
``--backlog-s`` old (the state after an outage), starts the leader in this
process and times how long it takes until every backlog tick is in the
broker's queue.  Prints ticks per second (median of the runs), the slowest
claim script (Redis SLOWLOG), whether the epoch stayed the same, the CPU
time of the process, and beside each run's time the physical limit of the
same ticks measured right after it on the broker's Redis
(``benchmarks/limit.py``: the bare ledger, history and queue writes) and
the ratio of the two.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.limit import bare_work, ratio
from dramatiq_cron_middleware import CronMiddleware
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def run_once(schedules: int, backlog_s: int, lock_ttl: int) -> dict[str, float]:
    with RedisServer() as lease_redis, RedisServer() as broker_redis:
        broker = RedisBroker(url=broker_redis.url)
        middleware = CronMiddleware(redis=lease_redis.url, lock_ttl=lock_ttl)
        broker.add_middleware(middleware)
        for i in range(schedules):
            dramatiq.actor(lambda: None, actor_name=f"job{i}", broker=broker, cron="* * * * * *")
        lease = lease_redis.client()
        lease.config_set("slowlog-log-slower-than", 5_000)
        now = int(lease.time()[0]) * 1000
        lease.set(middleware.keys.epoch, 1)
        lease.hset(
            middleware.keys.ticks, mapping={s.id: f"{now - backlog_s * 1000}:1:1" for s in middleware.all_schedules()}
        )
        queue = broker_redis.client()
        expected = schedules * backlog_s
        cpu = _cpu_seconds()
        started = time.perf_counter()
        middleware.start(broker)
        try:
            wait_for(lambda: queue.llen("dramatiq:default") >= expected, timeout=600, interval=0.05, what="the backlog")
            took = time.perf_counter() - started
            cpu = _cpu_seconds() - cpu
            epoch = int(lease.get(middleware.keys.epoch) or 0)
            slowest = max(
                (int(e["duration"]) for e in lease.slowlog_get(256) if "EVALSHA" in str(e["command"]).upper()),
                default=0,
            )
        finally:
            middleware.stop()
            broker.close()
        queue.flushall()
        limit = bare_work(queue, schedules=schedules, ticks_each=backlog_s)
        queue.close()
        return {
            "ticks": expected,
            "seconds": took,
            "rate": expected / took,
            "cpu_s": cpu,
            "slowest_ms": slowest / 1000,
            "epoch": epoch,
            "limit_s": limit.seconds,
        }


def _cpu_seconds() -> float:
    """User + system CPU time of this process (the leader runs in it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=300)
    parser.add_argument("--backlog-s", type=int, default=300)
    parser.add_argument("--lock-ttl", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [run_once(args.schedules, args.backlog_s, args.lock_ttl) for _ in range(args.runs)]
    for r in results:
        print(
            f"{r['ticks']:.0f} ticks in {r['seconds']:.2f} s = {r['rate']:,.0f} ticks/s "
            f"(limit {r['limit_s']:.2f} s: {ratio(r['seconds'], r['limit_s'])}); CPU {r['cpu_s']:.2f} s; "
            f"slowest script {r['slowest_ms']:.1f} ms; epoch at the end {r['epoch']:.0f} (2 = one leadership)"
        )
    seconds = statistics.median(r["seconds"] for r in results)
    limit = statistics.median(r["limit_s"] for r in results)
    print(
        f"median catch-up rate: {statistics.median(r['rate'] for r in results):,.0f} ticks/s; "
        f"median time {ratio(seconds, limit)} (target <= 5x limit); "
        f"median CPU {statistics.median(r['cpu_s'] for r in results):.2f} s"
    )


if __name__ == "__main__":
    main()
