"""Fire lag of bursts: how long after its tick each message is in a
RedisBroker's queue, for many schedules due at once.

Run: ``.venv/bin/python -m benchmarks.bursts [--seconds 10] [--cases all]``

The leader runs in this process (the same code as in a worker) against
real redis-servers on free loopback ports; the lag of a message is the wall
time of the broker's ``after_enqueue`` hook minus its tick.  Two
boundaries: ``in-claim`` (the lease on the broker's Redis, the default) and
``idempotent`` (the lease on another Redis).  Prints p50/p99/max per case,
and beside the p99 the physical limit: the bare Redis work of the largest
burst due at one tick (``benchmarks/limit.py``), timed on the broker's
Redis right after the case, median of five.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import threading
import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.limit import bare_work, ratio
from benchmarks.measure import percentiles
from dramatiq_cron_middleware import CronMiddleware
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


class _Lags(dramatiq.Middleware):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[float, float]] = []  # (tick s, enqueued s)

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        tick = message.options.get("cron_tick")
        if tick:
            now = time.time()
            with self.lock:
                self.records.append((dt.datetime.fromisoformat(tick).timestamp(), now))


def run_case(*, schedules: int, spread: bool, same_redis: bool, seconds: float) -> dict[str, Any]:
    with RedisServer() as broker_redis, RedisServer() as lease_redis:
        broker = RedisBroker(url=broker_redis.url)
        lags = _Lags()
        middleware = CronMiddleware(redis=None if same_redis else lease_redis.url, lock_ttl=15000)
        broker.add_middleware(middleware)
        broker.add_middleware(lags)
        for i in range(schedules):
            cron = "* * * * * *"
            if spread:
                # Each fires once every two minutes, at its own second of
                # even or odd minutes: about 0.8 % of them every second.
                cron = f"{i % 60} {'*/2' if i % 120 < 60 else '1-59/2'} * * * *"
            dramatiq.actor(lambda: None, actor_name=f"job{i}", broker=broker, cron=cron)
        middleware.start(broker)
        try:
            wait_for(lambda: middleware.leader is not None and middleware.leader.leading, timeout=30, what="a leader")
            start = time.time() + 2.0  # past the first sync
            time.sleep(seconds + 2.5)
            end = time.time() - 0.5
        finally:
            middleware.stop()
            broker.close()
        with lags.lock:
            kept = [(tick, at) for tick, at in lags.records if start <= tick <= end]
        values = [(at - tick) * 1000 for tick, at in kept]
        burst = max(collections.Counter(tick for tick, _ in kept).values(), default=1)
        client = broker_redis.client()
        client.flushall()
        limit = bare_work(client, schedules=burst, reps=5)
        client.close()
    return {"messages": len(values), "lag_ms": percentiles(values), "burst": burst, "limit_ms": round(limit.ms, 2)}


CASES = {
    "1": dict(schedules=1, spread=False),
    "1000": dict(schedules=1000, spread=False),
    "10000": dict(schedules=10_000, spread=False),
    "10000-spread": dict(schedules=10_000, spread=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--cases", default="all", help="comma-separated: " + ",".join(CASES))
    parser.add_argument("--boundaries", default="in-claim,idempotent")
    args = parser.parse_args()
    names = list(CASES) if args.cases == "all" else args.cases.split(",")
    for name in names:
        for boundary in args.boundaries.split(","):
            r = run_case(**CASES[name], same_redis=boundary == "in-claim", seconds=args.seconds)  # type: ignore[arg-type]
            lag = r["lag_ms"]
            print(
                f"{name:>13} schedules, {boundary:>10}: {r['messages']:>6} messages, "
                f"lag p50 {lag.get('p50', 0):.1f} ms, p99 {lag.get('p99', 0):.1f} ms, max {lag.get('max', 0):.1f} ms; "
                f"limit of a burst of {r['burst']}: {r['limit_ms']:.2f} ms, "
                f"p99 {ratio(lag.get('p99', 0), r['limit_ms'])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
