"""Runtime schedules at scale: add/remove latency, bulk add rate, the
leader's full load (``load_all``) and the memory of 100,000 schedules.

The case of issue 12: 100,000 per-tenant daily jobs spread over the day,
in a handful of time zones.  Runs against its own redis-server on a free
loopback port (persistence off), from a process that runs no worker::

    .venv/bin/python -m benchmarks.runtime [--count 100000] [--samples 2000]

The full load runs in a fresh child process, as a new leader's takeover
would, so its RSS is that of a process holding the schedules and nothing
else.  Beside the add and remove latencies, the bulk add and the load,
``limit`` holds their physical limits measured in the same run
(``benchmarks/limit.py``: a bare ``HSET``/``HDEL`` round trip of one
definition, a pipelined ``HSET`` of every definition, the bare reads of a
takeover) and ``x_limit`` the ratios.  Prints one JSON object; nothing is
asserted (figures go to docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker

from benchmarks.limit import bare_hset, bare_reads, round_trip_us
from benchmarks.measure import load_average, rss_mib
from dramatiq_cron_middleware import CronMiddleware, Schedule
from tests.support.redis_server import RedisServer

_ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney")


def tenant_schedule(n: int) -> Schedule:
    """Tenant ``n``'s daily report: minutes spread over the day, one of five zones."""
    minute_of_day = (n * 7) % 1440
    return Schedule(
        f"{minute_of_day % 60} {minute_of_day // 60} * * *",
        timezone=_ZONES[n % len(_ZONES)],
        kwargs={"tenant": n},
        max_age=3_600_000,
    )


def _latencies(values: list[float]) -> dict[str, float]:
    """p50/p99/max in ms to the hundredth (a removal takes well under 0.1 ms)."""
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, round(0.99 * len(ordered) + 0.5) - 1)], 2),
        "max": round(ordered[-1], 2),
    }


def _app(url: str) -> tuple[CronMiddleware, dramatiq.Actor[Any, Any]]:
    broker = StubBroker()
    cron = CronMiddleware(redis=url)
    broker.add_middleware(cron)

    def report(tenant: int) -> None:
        pass

    return cron, dramatiq.actor(report, broker=broker)


def load_in_this_process(url: str) -> dict[str, Any]:
    """A new leader's sync: every definition, in a process holding nothing else."""
    cron, _ = _app(url)
    store = cron.runtime
    store.version()
    gc.collect()
    rss_before = rss_mib(os.getpid())
    started, cpu_started = time.perf_counter(), time.process_time()
    version, schedules = store.load_all()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    gc.collect()
    rss_after = rss_mib(os.getpid())
    return {
        "seconds": round(elapsed, 2),
        # This process's CPU time: on a shared machine, wall time also
        # counts other processes' turns on the cores.
        "cpu_seconds": round(cpu, 2),
        "schedules": len(schedules),
        "version": version,
        "rss_mib_process": round(rss_after, 1),
        "rss_mib_schedules": round(rss_after - rss_before, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000, help="runtime schedules for bulk add and load_all")
    parser.add_argument("--samples", type=int, default=2000, help="single add/remove calls timed")
    parser.add_argument("--loads", type=int, default=5, help="full loads, each in a fresh process (median kept)")
    parser.add_argument("--load-from", metavar="URL", help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args()
    if args.load_from:
        print(json.dumps(load_in_this_process(args.load_from)))
        return 0

    results: dict[str, Any] = {
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "load_before": load_average()},
        "count": args.count,
    }
    with RedisServer() as server:
        cron, actor = _app(server.url)
        store = cron.runtime
        store.version()  # connect, and load the scripts, before timing

        adds, removes = [], []
        for n in range(args.samples):
            started = time.perf_counter()
            cron.add(actor, tenant_schedule(n), name=f"single-{n}")
            adds.append((time.perf_counter() - started) * 1000)
        client = server.client()
        definition = client.hget(cron.keys.runtime, client.hrandfield(cron.keys.runtime))
        limit_add = round_trip_us(client, (("HSET", "limit", f"x:{n}", definition) for n in range(args.samples)))
        limit_remove = round_trip_us(client, (("HDEL", "limit", f"x:{n}") for n in range(args.samples)))
        for n in range(args.samples):
            started = time.perf_counter()
            cron.remove(actor, f"single-{n}")
            removes.append((time.perf_counter() - started) * 1000)
        results["add_ms"] = _latencies(adds)
        results["remove_ms"] = _latencies(removes)

        items = [(actor, tenant_schedule(n), f"tenant-{n}") for n in range(args.count)]
        started = time.perf_counter()
        store.add_many(items)
        elapsed = time.perf_counter() - started
        results["bulk_add"] = {"seconds": round(elapsed, 2), "per_second": round(args.count / elapsed)}
        del items
        limit_bulk = bare_hset(client, "limit", ((f"x:{n}", definition) for n in range(args.count)))
        limit_load = bare_reads(client, cron.keys).seconds

        loads = []
        for _ in range(args.loads):
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.runtime", "--load-from", server.url],
                capture_output=True,
                text=True,
                check=True,
            )
            loads.append(json.loads(child.stdout))
        loads.sort(key=lambda r: r["seconds"])
        results["load_all"] = {**loads[len(loads) // 2], "all_seconds": [r["seconds"] for r in loads]}
        version = results["load_all"]["version"]

        # A leader's steady state: 1 % of the schedules change, it reads only those.
        changed = [(actor, tenant_schedule(n + 1), f"tenant-{n}") for n in range(0, args.count, 100)]
        store.add_many(changed)
        started = time.perf_counter()
        new_version, changes = store.changes_since(version)
        results["changes_since_1_percent"] = {
            "seconds": round(time.perf_counter() - started, 3),
            "changes": len(changes),
            "version": new_version,
        }
        started = time.perf_counter()
        page = cron.list(search="tenant-9999", limit=20)
        results["list_search_ms"] = round((time.perf_counter() - started) * 1000, 1)
        results["list_search_found"] = len(page.items)
        started = time.perf_counter()
        cron.list(limit=100, cursor="report:tenant-5")
        results["list_page_ms"] = round((time.perf_counter() - started) * 1000, 1)
        info: Any = store.client.info("memory")
        results["redis_used_memory_mib"] = round(info["used_memory"] / 2**20, 1)
        results["limit"] = {
            "add_ms": round(limit_add / 1000, 3),
            "remove_ms": round(limit_remove / 1000, 3),
            "bulk_add_s": round(limit_bulk, 2),
            "load_all_s": round(limit_load, 2),
        }
        results["x_limit"] = {
            "add_p50": round(results["add_ms"]["p50"] * 1000 / limit_add, 1),
            "remove_p50": round(results["remove_ms"]["p50"] * 1000 / limit_remove, 1),
            "bulk_add": round(elapsed / limit_bulk, 1),
            "load_all": round(results["load_all"]["seconds"] / limit_load, 1),
        }
        client.close()
    results["machine"]["load_after"] = load_average()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
