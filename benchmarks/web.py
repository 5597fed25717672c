"""Server time of each dashboard page, with 10,000 declared schedules and
with 100,000 runtime schedules.

    .venv/bin/python -m benchmarks.web [--repeat 50]

Calls the WSGI application in-process (no HTTP, no browser: the time a
server spends producing the page) against a real redis-server started on a
free loopback port, and prints the median and p99 per page, and the median
as a multiple of one bare Redis round trip (``PING``, median of 500, the
same run: the floor of any page that reads Redis; ``benchmarks/limit.py``).  The Redis
state is what a long-running scheduler leaves: a ledger entry per schedule,
a full history stream (10,000 entries), a lease, candidates and a few
paused schedules.  It is written directly in the leader's formats, since
making 10,000 schedules really fire would take as long as the history
spans.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote
from wsgiref.util import setup_testing_defaults

import dramatiq
from dramatiq.brokers.stub import StubBroker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.limit import round_trip_us  # noqa: E402
from dramatiq_cron_middleware import CronMiddleware  # noqa: E402
from dramatiq_cron_middleware.web import CronDashboard  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

_EXPRESSIONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5", "*/15 * * * * *", "H * * * *"]


def _app(url: str, *, code: int) -> tuple[StubBroker, CronMiddleware]:
    broker = StubBroker()
    middleware = CronMiddleware(redis=url)
    broker.add_middleware(middleware)
    for i in range(code):
        expression = _EXPRESSIONS[i % len(_EXPRESSIONS)]
        dramatiq.actor(lambda: None, actor_name=f"job_{i:06d}", broker=broker, cron=expression)
    return broker, middleware


def _state(server: RedisServer, ids: list[str], *, epoch: int = 7) -> None:
    """A ledger entry per schedule, a full history, a lease and candidates."""
    client = server.client()
    now = int(time.time() * 1000)
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(ids), 5000):
        pipe.hset(
            "{dramatiq-cron}:ticks", mapping={sid: f"{now - 60_000}:{epoch}:1" for sid in ids[start : start + 5000]}
        )
    for n in range(10_000):
        sid = ids[n % len(ids)] if n % 10 else ids[0]  # one schedule owns a tenth of the stream
        pipe.xadd(
            "{dramatiq-cron}:history",
            {
                "schedule": sid,
                "tick": now - n * 1000,
                "outcome": "fired",
                "at": now - n * 1000 + 3,
                "epoch": epoch,
                "detail": str(n % 40),
                "message_id": f"m-{n}",
            },
        )
    pipe.hset(
        "{dramatiq-cron}:lease",
        mapping={
            "token": "t",
            "epoch": epoch,
            "host": "bench",
            "pid": 4242,
            "since": now - 3_600_000,
            "renewed": now,
            "ttl": 15000,
            "candidate": "bench|4242|c0",
        },
    )
    pipe.pexpire("{dramatiq-cron}:lease", 15000)
    pipe.zadd("{dramatiq-cron}:candidates", {f"bench|{4242 + i}|c{i}": now for i in range(8)})
    pipe.sadd("{dramatiq-cron}:paused", *ids[1:6])
    pipe.execute()


def _call(app: Callable[..., Iterable[bytes]], path: str, query: str = "") -> tuple[float, float]:
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, QUERY_STRING=query, REQUEST_METHOD="GET")
    environ["wsgi.input"] = io.BytesIO(b"")
    status: list[str] = []
    started, cpu = time.perf_counter(), time.process_time()
    body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    elapsed = (time.perf_counter() - started) * 1000
    cpu_ms = (time.process_time() - cpu) * 1000
    assert status[0].startswith("200"), (path, query, status, body[:300])
    return elapsed, cpu_ms


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _measure(app: Any, pages: list[tuple[str, str, str]], repeat: int) -> list[tuple[str, float, float, float]]:
    """Per page: wall-clock median and p99, and the p99 of this process's
    CPU time (which leaves out time the machine gave to other processes)."""
    out = []
    for label, path, query in pages:
        _call(app, path, query)  # warm: templates compiled, connections open
        gc.collect()
        samples = [_call(app, path, query) for _ in range(repeat)]
        wall = [w for w, _ in samples]
        out.append((label, statistics.median(wall), _p99(wall), _p99([c for _, c in samples])))
    return out


def _print(title: str, rows: list[tuple[str, float, float, float]], server: RedisServer) -> None:
    client = server.client()
    round_trip_ms = round_trip_us(client, (("PING",) for _ in range(500))) / 1000
    client.close()
    print(f"\n{title} (a bare round trip: {round_trip_ms:.3f} ms)")
    print(f"  {'page':<52} {'median':>9} {'p99':>9} {'CPU p99':>9} {'median x round trip':>20}")
    for label, median, p99, cpu in rows:
        print(f"  {label:<52} {median:>7.1f}ms {p99:>7.1f}ms {cpu:>7.1f}ms {median / round_trip_ms:>19.0f}x")


def _health_read(app: Any, title: str, repeat: int = 3) -> None:
    """Every schedule's health as the overview's counts and /health read it
    (kept by the dashboard and read again in the background): median of
    ``repeat`` reads, wall clock and CPU."""
    from dramatiq_cron_middleware.web.health_pages import read_all

    middleware = app.middleware
    samples = []
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        read_all(app.cron, middleware.all_schedules(), app.runtime_index, policy=middleware.health_policy)
        samples.append(((time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000))
    wall, cpu_ms = statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)
    print(f"  every schedule's health, {title}: {wall:.0f} ms median of {repeat} ({cpu_ms:.0f} ms CPU)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=100, help="requests per page (default 100)")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )

    with RedisServer() as server:
        broker, middleware = _app(server.url, code=10_000)
        ids = [s.id for s in middleware.all_schedules()]
        _state(server, ids)
        app = CronDashboard(broker, unauthenticated=True)
        busy, rare = quote(ids[0]), quote(ids[4321])
        rows = _measure(
            app,
            [
                ("overview", "/cron/", ""),
                ("schedules, first page (50)", "/cron/schedules", ""),
                ("schedules, page 100 (50)", "/cron/schedules", "page=100"),
                ("schedules, 200 per page", "/cron/schedules", "per_page=200"),
                ("schedules, search 'job_0099'", "/cron/schedules", "q=job_0099"),
                ("schedules, paused only", "/cron/schedules", "state=paused"),
                ("history, a schedule with 1,000 entries", "/cron/schedule", f"id={busy}"),
                ("history, a schedule with 1 entry (scan-bound)", "/cron/schedule", f"id={rare}"),
            ],
            args.repeat,
        )
        _print("10,000 declared schedules", rows, server)
        _health_read(app, "10,000 declared")
        broker.close()

    with RedisServer() as server:
        broker, middleware = _app(server.url, code=10)
        runtime = getattr(middleware, "runtime", None)
        if runtime is None:
            print("\n100,000 runtime schedules: skipped (this version has no runtime schedules)")
            return 0
        started = time.monotonic()
        runtime.add_many((f"job_{i % 10:06d}", _EXPRESSIONS[i % 5], f"r{i:06d}") for i in range(100_000))
        print(f"\n(stored 100,000 runtime schedules in {time.monotonic() - started:.1f}s)")
        ids = [s.id for s in middleware.all_schedules()]
        page = runtime.list(limit=10_000)
        runtime_ids = [r.id for r in page.items]
        _state(server, ids + runtime_ids)
        app = CronDashboard(broker, unauthenticated=True)
        rows = _measure(
            app,
            [
                ("overview", "/cron/", ""),
                ("schedules, first page (50)", "/cron/schedules", ""),
                ("schedules, runtime only, first page", "/cron/schedules", "source=runtime"),
                ("schedules, runtime, a page in the middle", "/cron/schedules", "source=runtime&page=1000"),
                ("schedules, runtime, the last page", "/cron/schedules", "source=runtime&page=2000"),
                ("next to run (all 100,010)", "/cron/next", ""),
                ("schedules, runtime, 200 per page", "/cron/schedules", "source=runtime&per_page=200"),
                ("schedules, search 'r09999'", "/cron/schedules", "q=r09999"),
                ("schedules, paused only", "/cron/schedules", "state=paused"),
                ("history of a runtime schedule", "/cron/schedule", f"id={quote(runtime_ids[0])}"),
                ("edit form of a runtime schedule", "/cron/runtime/edit", f"id={quote(runtime_ids[0])}"),
            ],
            args.repeat,
        )
        _print("100,000 runtime schedules (+10 declared)", rows, server)
        _health_read(app, "100,000 runtime")
        broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
