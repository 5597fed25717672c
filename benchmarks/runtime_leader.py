"""The leader with 100,000 runtime schedules: takeover time, fire lag and
memory.

Run: ``.venv/bin/python -m benchmarks.runtime_leader [--count 100000] [--seconds 30] [--kind interval|cron]``

Starts a redis-server on a free loopback port, stores ``--count`` runtime
schedules with ``add_many`` (``--kind interval``: every 100 minutes, offsets
spread so that 1 % of them fall due every minute, about 17 a second;
``--kind cron``: a daily job per tenant at a minute of the day, in one of
eight time zones: 11,520 distinct expressions and zones), then
starts a leader in this process on a RedisBroker on the same Redis and
measures:

- takeover: from starting a leader to its tick queue being in sync with
  the ledger (acquire, ``load_all``, ``changes_since``, the chunked sync),
  the first time after the bulk add, and ``--takeovers`` times more as in
  steady state (another leader finds its ledger entries; median and max);
- fire lag: the broker's ``after_enqueue`` minus the tick, over
  ``--seconds`` of steady leading (p50, p99, max);
- the process's RSS before the leader started and while it leads.

Prints one JSON object; nothing is asserted (figures go to docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import threading
import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.measure import load_average, percentiles, rss_mib
from dramatiq_cron_middleware import CronMiddleware, Schedule
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

PERIOD_MS = 6_000_000  # 100 minutes: 1 % of the schedules per minute


class _Lags(dramatiq.Middleware):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: list[float] = []
        self.since = float("inf")

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        tick = message.options.get("cron_tick")
        if not tick:
            return
        now = time.time()
        at = dt.datetime.fromisoformat(tick).timestamp()
        if at >= self.since:
            with self.lock:
                self.values.append((now - at) * 1000)


ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Africa/Lagos",
)


def schedule_of(kind: str, n: int) -> Schedule:
    """Tenant n's schedule."""
    if kind == "cron":
        # Per-tenant daily reports spread over the day, in the tenant's zone.
        minute = (n * 7) % 1440
        return Schedule(f"{minute % 60} {minute // 60} * * *", timezone=ZONES[n % len(ZONES)], kwargs={"tenant": n})
    # Schedule n falls due at minute n % 100 of the period, at second
    # (n // 100) % 60 of that minute.
    return Schedule(every=PERIOD_MS, offset=(n % 100) * 60_000 + ((n // 100) % 60) * 1000, kwargs={"tenant": n})


def take_over(middleware: CronMiddleware, broker: RedisBroker, count: int) -> float:
    """Start a leader; seconds until its tick queue holds every schedule in
    sync with the ledger."""
    started = time.perf_counter()
    middleware.start(broker)
    leader = middleware.leader
    assert leader is not None
    wait_for(
        lambda: leader.leading and leader.queue.in_sync and len(leader.queue.schedules) >= count,
        timeout=120,
        interval=0.01,
        what="the leader to load and sync every schedule",
    )
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--takeovers", type=int, default=5, help="steady-state takeovers measured")
    parser.add_argument(
        "--kind",
        choices=("interval", "cron"),
        default="interval",
        help="interval: every 100 minutes, offsets spread (1 %% due per minute); cron: a daily job per tenant "
        "at a minute of the day in one of eight time zones",
    )
    args = parser.parse_args()
    out: dict[str, Any] = {"count": args.count, "kind": args.kind, "load_before": load_average()}
    with RedisServer() as server:
        broker = RedisBroker(url=server.url)
        middleware = CronMiddleware(lock_ttl=15000)
        broker.add_middleware(middleware)
        lags = _Lags()
        broker.add_middleware(lags)
        dramatiq.actor(lambda tenant: None, actor_name="tenant_report", broker=broker)
        # Offsets: schedule n falls due at minute n % 100 of the period, at
        # second (n // 100) % 60 of that minute.
        items = [("tenant_report", schedule_of(args.kind, n), f"tenant-{n}") for n in range(args.count)]
        started = time.perf_counter()
        middleware.runtime.add_many(items)
        out["bulk_add_per_s"] = round(args.count / (time.perf_counter() - started))
        del items
        gc.collect()
        out["rss_before_leader_mib"] = round(rss_mib(os.getpid()), 1)
        out["first_takeover_s"] = take_over(middleware, broker, args.count)
        # A takeover as it happens in steady state: another leader (here a
        # new leader thread) finds the ledger entries and shapes in place.
        takeovers = []
        for _ in range(args.takeovers):
            middleware.stop()
            gc.collect()
            takeovers.append(take_over(middleware, broker, args.count))
        out["takeover_s"] = {
            "median": statistics.median(takeovers),
            "max": max(takeovers),
            "all": takeovers,
        }
        lags.since = time.time() + 1.0
        time.sleep(args.seconds + 1.5)
        out["rss_leading_mib"] = round(rss_mib(os.getpid()), 1)
        middleware.stop()
        broker.close()
        with lags.lock:
            out["fire_lag_ms"] = percentiles(lags.values)
    out["load_after"] = load_average()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
