"""Scenarios measuring dramatiq-cron-middleware under real ``dramatiq``
processes (the app is ``benchmarks/app.py``).

Each function starts what it needs, measures, stops every process it
started (by pid) and returns plain figures.
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import Monitor, commands_by_pid, cpu_seconds, percentiles, rss_mib, socket_owners
from tests.support.instances import Instance, wait_for
from tests.support.redis_server import RedisServer

LEASE_KEY = "{dramatiq-cron}:lease"


class Stage:
    """A lease-only Redis and a broker Redis, shared by the scenarios and
    wiped between them."""

    def __init__(self, lease: RedisServer, broker: RedisServer) -> None:
        self.lease = lease
        self.broker = broker

    def wipe(self) -> None:
        """FLUSHALL both servers."""
        for server in (self.lease, self.broker):
            client = server.client()
            client.flushall()
            client.close()


def _env(
    stage: Stage, record: str, *, schedules: int, shape: str, broker: str, ttl: int, **more: str
) -> dict[str, str]:
    env = {
        "DRAMATIQ_CRON_REDIS_URL": stage.lease.url,
        "BENCH_BROKER": stage.broker.url if broker == "redis" else "stub",
        "BENCH_SCHEDULES": str(schedules),
        "BENCH_SHAPE": shape,
        "BENCH_TTL": str(ttl),
        "BENCH_RECORD": record,
    }
    env.update(more)
    return env


def _instance(env: dict[str, str], name: str, processes: int = 1) -> Instance:
    return Instance(env, processes=processes, threads=1, app="benchmarks.app", name=name, extra=["-Q", "bench-idle"])


def _leader_pid(stage: Stage) -> int | None:
    client = stage.lease.client()
    try:
        pid = client.hget(LEASE_KEY, "pid")
    finally:
        client.close()
    return int(pid) if pid else None


def _wait_leading(stage: Stage, instance: Instance) -> int:
    return int(
        wait_for(
            lambda: (pid := _leader_pid(stage)) in instance.worker_pids() and pid,
            timeout=30,
            what=f"{instance.name} to lead",
        )
    )


def _lags(record: str, start: float, end: float) -> list[float]:
    """Enqueue time minus tick, ms, for ticks in [start, end]."""
    out = []
    for path in glob.glob(os.path.join(record, "lag-*.tsv")):
        for line in Path(path).read_text().splitlines():
            tick_iso, at = line.split("\t")
            tick = dt.datetime.fromisoformat(tick_iso).timestamp()
            if start <= tick <= end:
                out.append((float(at) - tick) * 1000)
    return out


def _leader_tid(record: str, pid: int) -> int | None:
    path = os.path.join(record, f"threads-{pid}.json")
    try:
        wait_for(lambda: os.path.exists(path), timeout=5, what="thread ids")
        return int(json.loads(Path(path).read_text())["dramatiq-cron-leader"])
    except (AssertionError, KeyError, ValueError):
        return None


def fire_lag(stage: Stage, *, schedules: int, shape: str, broker: str, seconds: float) -> dict[str, Any]:
    """Lag of every enqueue over ``seconds`` of steady leading, plus the
    leader process's memory."""
    stage.wipe()
    record = tempfile.mkdtemp(prefix="bench-lag-")
    inst = _instance(_env(stage, record, schedules=schedules, shape=shape, broker=broker, ttl=15000), "lag")
    try:
        booted = time.time()
        inst.start()
        boot_s = time.time() - booted
        pid = _wait_leading(stage, inst)
        # The first second after acquisition includes the ledger sync.
        start = time.time() + 1.5
        time.sleep(seconds + 2.0)
        end = time.time() - 0.5
        rss = rss_mib(pid)
    finally:
        inst.close()
    lags = _lags(record, start, end)
    shutil.rmtree(record, ignore_errors=True)
    return {
        "schedules": schedules,
        "shape": shape,
        "broker": broker,
        "window_s": round(end - start, 1),
        "lag_ms": percentiles(lags),
        "rss_mib": round(rss, 1),
        "boot_s": round(boot_s, 2),
    }


def takeover(stage: Stage, *, how: str, ttl: int, reps: int, fast: bool = False) -> dict[str, Any]:
    """Time from the leader's SIGTERM or kill -9 to the follower holding the
    lease (the lease's ``since``, Redis time, minus the signal time)."""
    samples = []
    for rep in range(reps):
        stage.wipe()
        record = tempfile.mkdtemp(prefix="bench-takeover-")
        more = {"BENCH_FAST_TAKEOVER": "250"} if fast else {}
        env = _env(stage, record, schedules=1, shape="idle", broker="stub", ttl=ttl, **more)
        first = _instance(env, f"takeover-a{rep}")
        second = _instance(env, f"takeover-b{rep}")
        try:
            first.start()
            _wait_leading(stage, first)
            second.start()
            time.sleep(0.5)  # the follower is blocked in its wait
            client = stage.lease.client()
            old = client.hget(LEASE_KEY, "token")
            sent = time.time()
            if how == "sigterm":
                first.signal(signal.SIGTERM)
            else:
                first.kill9()

            def taken(client: Any = client, old: Any = old) -> bool:
                token = client.hget(LEASE_KEY, "token")
                return token is not None and token != old

            wait_for(taken, timeout=ttl / 1000 + 10, interval=0.002, what="takeover")
            since = int(client.hget(LEASE_KEY, "since") or 0)
            client.close()
            samples.append(since - sent * 1000)
        finally:
            first.close()
            second.close()
            shutil.rmtree(record, ignore_errors=True)
    return {"how": how, "ttl": ttl, "fast_takeover": fast, "takeover_ms": percentiles(samples), "samples": samples}


def redis_cost(stage: Stage, *, ttl: int, shape: str, schedules: int, seconds: float) -> dict[str, Any]:
    """Round trips per second of the leader and of each of two followers
    on the lease Redis (StubBroker: no broker traffic there), and the CPU
    of the leader thread over the same window."""
    stage.wipe()
    record = tempfile.mkdtemp(prefix="bench-cost-")
    env = _env(stage, record, schedules=schedules, shape=shape, broker="stub", ttl=ttl)
    leader_inst = _instance(env, "cost-leader")
    followers = _instance(env, "cost-followers", processes=2)
    try:
        leader_inst.start()
        leader = _wait_leading(stage, leader_inst)
        followers.start()
        time.sleep(1.0)
        tid = _leader_tid(record, leader)
        cpu_thread0 = cpu_seconds(leader, tid) if tid else None
        cpu_proc0 = cpu_seconds(leader)
        follower_pids = followers.worker_pids()
        cpu_follow0 = {p: cpu_seconds(p) for p in follower_pids}
        monitor = Monitor(stage.lease.port)
        time.sleep(seconds)
        monitor.stop()
        owners = socket_owners(stage.lease.port)
        cpu_thread = (cpu_seconds(leader, tid) - cpu_thread0) if tid and cpu_thread0 is not None else None
        cpu_proc = cpu_seconds(leader) - cpu_proc0
        cpu_follow = [cpu_seconds(p) - cpu_follow0[p] for p in follower_pids]
        still_leader = _leader_pid(stage)
    finally:
        leader_inst.close()
        followers.close()
        shutil.rmtree(record, ignore_errors=True)
    per_pid, unknown, inside = commands_by_pid(monitor, owners)
    window = monitor.elapsed
    return {
        "ttl": ttl,
        "shape": shape,
        "schedules": schedules,
        "window_s": round(window, 1),
        "leader_cmds_per_s": round(per_pid.get(leader, 0) / window, 3),
        "follower_cmds_per_s": [round(per_pid.get(p, 0) / window, 3) for p in follower_pids],
        "unattributed": unknown,
        "inside_scripts_per_s": round(inside / window, 1),
        "leader_thread_cpu_pct": round(100 * cpu_thread / window, 3) if cpu_thread is not None else None,
        "leader_process_cpu_pct": round(100 * cpu_proc / window, 3),
        "follower_process_cpu_pct": [round(100 * c / window, 3) for c in cpu_follow],
        "leader_unchanged": still_leader == leader,
    }


def duplicates_after_lock_deletion(stage: Stage, *, seconds: float) -> dict[str, Any]:
    """Two instances, one schedule every second; the lease key is deleted
    once; count (schedule, tick) pairs enqueued more than once."""
    stage.wipe()
    record = tempfile.mkdtemp(prefix="bench-dup-")
    env = _env(stage, record, schedules=1, shape="every-second", broker="stub", ttl=2000)
    first = _instance(env, "dup-a")
    second = _instance(env, "dup-b")
    try:
        first.start()
        _wait_leading(stage, first)
        second.start()
        time.sleep(1.5)
        client = stage.lease.client()
        deleted_at = time.time()
        client.delete(LEASE_KEY)
        client.close()
        time.sleep(seconds)
        end = time.time() - 1.0
    finally:
        first.close()
        second.close()
    seen: dict[str, int] = {}
    for path in glob.glob(os.path.join(record, "lag-*.tsv")):
        for line in Path(path).read_text().splitlines():
            tick = line.split("\t")[0]
            seen[tick] = seen.get(tick, 0) + 1
    shutil.rmtree(record, ignore_errors=True)
    after = [t for t in seen if deleted_at - 1 <= dt.datetime.fromisoformat(t).timestamp() <= end]
    expected = int(end) - int(deleted_at - 1)
    return {
        "duplicates": sum(seen[t] - 1 for t in after),
        "ticks_enqueued": len(after),
        "ticks_expected": expected,
        "lost": max(0, expected - len(after)),
    }
