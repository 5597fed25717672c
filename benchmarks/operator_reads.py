"""Operator reads at scale (issue 32): ``dramatiq-cron check``, ``list``
(first page, ``--limit 50``), ``status`` and the dashboard's overview and
schedules page, with 100,000 runtime schedules.

    .venv/bin/python -m benchmarks.operator_reads [--count 100000] [--repeat 3]

Runs against its own redis-server on a free loopback port.  The CLI
commands run in-process through ``ops.cli.main`` (their output discarded),
the dashboard pages through its WSGI application.  Every runtime schedule
has a ledger entry, as after a leader registered them.  Prints the median
wall time of ``repeat`` calls per read, and this process's CPU time (what
a loaded machine changes least; Redis's own time is not in it); nothing is
asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dramatiq_cron_middleware.ops import cli  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

_APP = """
import os
import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq_cron_middleware import CronMiddleware

broker = StubBroker()
broker.add_middleware(CronMiddleware(redis=os.environ["BENCH_OPS_REDIS"]))
for n in range(10):
    def job(tenant: int = 0) -> None:
        pass
    job.__name__ = f"job_{n}"
    dramatiq.actor(job, broker=broker, actor_name=f"job_{n}", cron="0 3 * * *")
"""

_EXPRESSIONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5", "H * * * *"]


def _time(call: Any, repeat: int) -> tuple[float, float]:
    """The median wall time and this process's CPU time of ``repeat`` calls, ms."""
    wall, cpu = [], []
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        call()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - used) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def _cli(*argv: str) -> Any:
    def call() -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main([argv[1], argv[0], *argv[2:]])
            except SystemExit as exc:
                code = exc.code
        if not out.getvalue() or code not in (0, 1, 2):
            raise RuntimeError(f"{argv}: exit {code}: {err.getvalue()[-500:]}")

    return call


def _page(app: Any, path: str, query: str = "") -> Any:
    def call() -> None:
        environ: dict[str, Any] = {"PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": "GET"}
        setup_testing_defaults(environ)
        body = b"".join(app(environ, lambda status, headers, exc_info=None: None))
        assert body

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000, help="runtime schedules (default 100,000)")
    parser.add_argument("--repeat", type=int, default=3, help="calls per read, median kept (default 3)")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    with RedisServer() as server, tempfile.TemporaryDirectory() as folder:
        Path(folder, "bench_ops_app.py").write_text(_APP)
        sys.path.insert(0, folder)
        os.environ["BENCH_OPS_REDIS"] = server.url
        import bench_ops_app  # type: ignore[import-not-found]

        from dramatiq_cron_middleware.web import CronDashboard

        cron = next(m for m in bench_ops_app.broker.middleware if hasattr(m, "runtime"))
        started = time.monotonic()
        cron.runtime.add_many((f"job_{i % 10}", _EXPRESSIONS[i % 5], f"r{i:06d}") for i in range(args.count))
        client = server.client()
        ids = [s.id for s in cron.all_schedules()]
        cursor = None
        while True:
            page = cron.runtime.list(cursor=cursor, limit=10_000)
            ids += [r.id for r in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        pipe = client.pipeline(transaction=False)
        now_ms = int(time.time() * 1000) - 60_000
        for schedule_id in ids:
            pipe.hset(cron.keys.ticks, schedule_id, f"{now_ms - now_ms % 60_000}:3")
        pipe.execute()
        print(f"stored {args.count:,} runtime schedules and their ledger in {time.monotonic() - started:.1f}s")
        spec = "bench_ops_app:broker"
        dashboard = CronDashboard(bench_ops_app.broker, unauthenticated=True)
        reads = [
            ("check", _cli(spec, "check")),
            ("list --limit 50 (first page)", _cli(spec, "list", "--limit", "50")),
            ("status", _cli(spec, "status")),
            ("dashboard overview", _page(dashboard, "/cron/")),
            ("dashboard schedules, first page", _page(dashboard, "/cron/schedules")),
        ]
        for name, call in reads:
            wall, cpu = _time(call, args.repeat)
            print(f"  {name}: {wall:,.0f} ms median of {args.repeat} (CPU of this process {cpu:,.0f} ms)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
