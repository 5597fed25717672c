"""The leader with 100,000 runtime schedules: takeover time, fire lag and
memory.

Run: ``.venv/bin/python -m benchmarks.runtime_leader [--count 100000] [--seconds 30] [--kind interval|cron]``

Starts a redis-server on a free loopback port, stores ``--count`` runtime
schedules with ``add_many`` (``--kind interval``: every 100 minutes, offsets
spread so that 1 % of them fall due every minute, about 17 a second;
``--kind cron``: a daily job per tenant at a minute of the day, in one of
eight time zones: 11,520 distinct expressions and zones), then
starts leaders, each in a new process (as a worker process that takes
over: a follower holds no runtime schedules), on a RedisBroker on the same
Redis, and measures:

- takeover: from starting a leader to its tick queue being in sync with
  the ledger (acquire, ``load_all``, ``changes_since``, the chunked sync),
  ``--takeovers`` times (median, max; and the median CPU time of the
  leader process over it, all threads: less sensitive to a busy host);
- fire lag: the broker's ``after_enqueue`` minus the tick, over
  ``--seconds`` of leading by the last of them (p50, p99, max);
- that process's RSS before its leader started and while it leads, and its
  CPU seconds per second while leading (firing, renewing, deciding health);
- the physical limit of a takeover (``benchmarks/limit.py``: the bare
  reads of every definition and of its ledger entry and shape, nothing
  decoded), on the same Redis after the takeovers, and the takeover's
  median as a multiple of it.

Prints one JSON object; nothing is asserted (figures go to docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.limit import bare_reads
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


def take_over(middleware: CronMiddleware, broker: RedisBroker, count: int) -> tuple[float, float]:
    """Start a leader; seconds until it holds the lease, and until its tick
    queue holds every schedule in sync with the ledger."""
    started = time.perf_counter()
    middleware.start(broker)
    leader = middleware.leader
    assert leader is not None
    wait_for(lambda: leader.leading, timeout=120, interval=0.001, what="the leader to acquire the lease")
    acquired = round(time.perf_counter() - started, 3)
    wait_for(
        lambda: leader.leading and leader.queue.in_sync and len(leader.queue.schedules) >= count,
        timeout=120,
        interval=0.01,
        what="the leader to load and sync every schedule",
    )
    return acquired, round(time.perf_counter() - started, 2)


def leader_process(url: str, count: int, seconds: float) -> None:
    """One leader in a process of its own, as a worker that takes over:
    prints its takeover time, its RSS before and while leading, and the
    fire lags over ``seconds`` of leading."""
    broker = RedisBroker(url=url)
    middleware = CronMiddleware(lock_ttl=15000)
    broker.add_middleware(middleware)
    lags = _Lags()
    broker.add_middleware(lags)
    dramatiq.actor(lambda tenant: None, actor_name="tenant_report", broker=broker)
    out: dict[str, Any] = {"rss_before_mib": round(rss_mib(os.getpid()), 1)}
    cpu = time.process_time()
    out["acquired_s"], out["takeover_s"] = take_over(middleware, broker, count)
    out["cpu_s"] = round(time.process_time() - cpu, 2)  # this process, every thread
    lags.since = time.time() + 1.0
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(seconds + 1.5 if seconds else 0)
    if seconds:
        # The steady state: firing, renewing and (run monitoring) deciding health.
        out["cpu_leading_per_s"] = round((time.process_time() - cpu) / (time.perf_counter() - wall), 4)
    out["rss_leading_mib"] = round(rss_mib(os.getpid()), 1)
    middleware.stop()
    broker.close()
    with lags.lock:
        out["lags"] = lags.values
    print(json.dumps(out))


def _in_new_process(url: str, count: int, seconds: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.runtime_leader", "--leader", url, "--count", str(count)]
    done = subprocess.run([*command, "--seconds", str(seconds)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--takeovers", type=int, default=5, help="takeovers measured, each by a new process")
    parser.add_argument(
        "--kind",
        choices=("interval", "cron"),
        default="interval",
        help="interval: every 100 minutes, offsets spread (1 %% due per minute); cron: a daily job per tenant "
        "at a minute of the day in one of eight time zones (use --seconds 65 to see a minute's ticks)",
    )
    parser.add_argument("--leader", help=argparse.SUPPRESS)  # a leader process of a run
    args = parser.parse_args()
    if args.leader:
        leader_process(args.leader, args.count, args.seconds)
        return
    out: dict[str, Any] = {"count": args.count, "kind": args.kind, "load_before": load_average()}
    with RedisServer() as server:
        broker = RedisBroker(url=server.url)
        middleware = CronMiddleware(lock_ttl=15000)
        broker.add_middleware(middleware)
        dramatiq.actor(lambda tenant: None, actor_name="tenant_report", broker=broker)
        items = [("tenant_report", schedule_of(args.kind, n), f"tenant-{n}") for n in range(args.count)]
        started = time.perf_counter()
        middleware.runtime.add_many(items)
        out["bulk_add_per_s"] = round(args.count / (time.perf_counter() - started))
        del items
        # Each takeover by a new process (a follower holds no runtime
        # schedules); the last one leads for --seconds.
        runs = [_in_new_process(server.url, args.count, 0) for _ in range(max(args.takeovers - 1, 0))]
        runs.append(_in_new_process(server.url, args.count, args.seconds))
        takeovers = [run["takeover_s"] for run in runs]
        out["takeover_s"] = {"median": statistics.median(takeovers), "max": max(takeovers), "all": takeovers}
        out["lease_acquired_s"] = statistics.median(run["acquired_s"] for run in runs)
        out["takeover_cpu_s"] = statistics.median(run["cpu_s"] for run in runs)
        out["rss_before_leading_mib"] = runs[-1]["rss_before_mib"]
        out["rss_leading_mib"] = runs[-1]["rss_leading_mib"]
        out["fire_lag_ms"] = percentiles(runs[-1]["lags"])
        if "cpu_leading_per_s" in runs[-1]:
            out["leader_cpu_s_per_s"] = runs[-1]["cpu_leading_per_s"]
        client = server.client()
        limit = bare_reads(client, middleware.keys)
        client.close()
        out["limit_s"] = {"definitions": limit.ticks, "seconds": round(limit.seconds, 3)}
        out["takeover_x_limit"] = round(out["takeover_s"]["median"] / limit.seconds, 1)
        broker.close()
    out["load_after"] = load_average()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
