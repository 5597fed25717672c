"""Runs every benchmark scenario once, prints a summary and writes
``benchmarks/results/latest.json`` and ``latest.md``.

Usage (from the repository root, normally through ``benchmarks/run.sh``)::

    python -m benchmarks.run [--quick] [--no-peers] [--peers-venv DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import bursts, limit, ours, peers
from benchmarks.measure import load_average
from tests.support.redis_server import RedisServer

RESULTS = Path(__file__).resolve().parent / "results"


def _machine() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "?",
    )
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "redis": redis_version,
    }


def _limits(*, stage: ours.Stage) -> dict[str, float]:
    """The physical limit of the bursts measured here: the bare Redis work
    of 1, 1,000 and 10,000 ticks due at once, ms (median of five), on the
    broker's Redis."""
    stage.wipe()
    client = stage.broker.client()
    try:
        return {str(n): round(limit.bare_work(client, schedules=n, reps=5).ms, 2) for n in (1, 1000, 10_000)}
    finally:
        client.close()


def _step(name: str, results: dict[str, Any], fn: Any, **kwargs: Any) -> None:
    started = time.monotonic()
    print(f"-- {name} ...", flush=True)
    try:
        results[name] = fn(**kwargs)
    except Exception as exc:  # one failing scenario must not lose the others
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(f"   {json.dumps(results[name])} ({time.monotonic() - started:.0f} s)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter windows, one repetition, no 1,000-actor peers")
    parser.add_argument("--no-peers", action="store_true", help="skip dramatiq-crontab and periodiq")
    parser.add_argument("--peers-venv", default=os.environ.get("PEERS_VENV", "/tmp/dramatiq-cron-peers-venv"))
    args = parser.parse_args()
    quick = args.quick
    window = 6.0 if quick else 12.0
    reps = 1 if quick else 3
    results: dict[str, Any] = {"machine": _machine(), "quick": quick, "load_before": load_average()}
    began = time.monotonic()
    with RedisServer() as lease, RedisServer() as broker:
        stage = ours.Stage(lease, broker)
        _step("limit_burst_ms", results, _limits, stage=stage)
        for n, shape, brk in (
            (1, "every-second", "redis"),
            (1000, "every-second", "redis"),
            (1000, "every-second", "stub"),
            (10_000, "spread", "redis"),
        ):
            _step(
                f"ours_lag_{n}_{shape}_{brk}",
                results,
                ours.fire_lag,
                stage=stage,
                schedules=n,
                shape=shape,
                broker=brk,
                seconds=window if n > 1 else 2 * window,
            )
        # The same bursts with the leader in this process and the lease on
        # the broker's Redis (the default deployment: the claim script
        # enqueues), as benchmarks/bursts.py measures them.
        for case in bursts.CASES:
            _step(
                f"ours_burst_{case}_in_claim",
                results,
                bursts.run_case,
                **bursts.CASES[case],
                same_redis=True,
                seconds=window,
            )
        _step("ours_takeover_sigterm", results, ours.takeover, stage=stage, how="sigterm", ttl=2000, reps=reps)
        _step("ours_takeover_kill9", results, ours.takeover, stage=stage, how="kill9", ttl=2000, reps=reps)
        _step(
            "ours_takeover_kill9_fast",
            results,
            ours.takeover,
            stage=stage,
            how="kill9",
            ttl=2000,
            reps=reps,
            fast=True,
        )
        _step(
            "ours_cost_idle_ttl2000",
            results,
            ours.redis_cost,
            stage=stage,
            ttl=2000,
            shape="idle",
            schedules=100,
            seconds=window,
        )
        _step(
            "ours_cost_busy_ttl2000",
            results,
            ours.redis_cost,
            stage=stage,
            ttl=2000,
            shape="every-second",
            schedules=100,
            seconds=window,
        )
        _step(
            "ours_cost_idle_default",
            results,
            ours.redis_cost,
            stage=stage,
            ttl=15000,
            shape="idle",
            schedules=100,
            seconds=16.0 if quick else 31.0,
        )
        _step(
            "ours_duplicates_after_lease_deletion",
            results,
            ours.duplicates_after_lock_deletion,
            stage=stage,
            seconds=6.0,
        )
        if not args.no_peers:
            venv = args.peers_venv
            _step("peers_lag_1", results, peers.minute_lags, stage=stage, venv=venv, count=1)
            if not quick:
                _step("peers_lag_1000", results, peers.minute_lags, stage=stage, venv=venv, count=1000)
            _step("crontab_takeover_sigterm", results, peers.crontab_takeover, stage=stage, venv=venv, how="sigterm")
            _step("crontab_takeover_kill9", results, peers.crontab_takeover, stage=stage, venv=venv, how="kill9")
            _step(
                "crontab_duplicates_after_lock_deletion",
                results,
                peers.crontab_lock_deletion,
                stage=stage,
                venv=venv,
                seconds=8.0,
            )
            _step("crontab_cost", results, peers.crontab_redis_cost, stage=stage, venv=venv, seconds=window)
    results["load_after"] = load_average()
    results["duration_s"] = round(time.monotonic() - began)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    summary = render(results)
    (RESULTS / "latest.md").write_text(summary)
    print(summary)
    return 0


def _lag(r: dict[str, Any], key: str = "lag_ms", limit_ms: float | None = None) -> str:
    if "error" in r:
        return f"error: {r['error']}"
    v = r.get(key) or {}
    text = f"{v.get('p50')} / {v.get('p99')} / {v.get('max')} (n={v.get('n')})"
    if limit_ms and isinstance(v.get("p99"), (int, float)):
        text += f"; p99 {limit.ratio(v['p99'], limit_ms)} ({limit_ms} ms)"
    return text


def render(r: dict[str, Any]) -> str:
    """The summary table, Markdown."""
    g = r.get
    m = r["machine"]
    lines = [
        f"machine: {m['nproc']} x {m['cpu']}, Python {m['python']}, {m['redis']}",
        f"load average before: {r['load_before']}, after: {r['load_after']}; "
        f"duration {r['duration_s']} s; quick={r['quick']}",
        "",
        "| measure | figure |",
        "| --- | --- |",
    ]
    limits = g("limit_burst_ms") or {}
    if limits and "error" not in limits:
        lines.append(
            "| limit: bare Redis work of 1 / 1,000 / 10,000 ticks due at once (benchmarks/limit.py, ms) | "
            f"{limits['1']} / {limits['1000']} / {limits['10000']} |"
        )
    for key, label, burst in (
        ("ours_lag_1_every-second_redis", "ours: fire lag, 1 schedule, RedisBroker (p50/p99/max ms)", "1"),
        ("ours_lag_1000_every-second_redis", "ours: fire lag, 1,000 due at once, RedisBroker", "1000"),
        ("ours_lag_1000_every-second_stub", "ours: fire lag, 1,000 due at once, StubBroker", ""),
        ("ours_lag_10000_spread_redis", "ours: fire lag, 10,000 declared, ~0.8%/s due, RedisBroker", ""),
        ("ours_burst_1_in_claim", "ours: fire lag, 1 schedule, lease on the broker's Redis (in-claim)", "1"),
        ("ours_burst_1000_in_claim", "ours: fire lag, 1,000 due at once, in-claim", "1000"),
        ("ours_burst_10000_in_claim", "ours: fire lag, 10,000 due at once, in-claim", "10000"),
        ("ours_burst_10000-spread_in_claim", "ours: fire lag, 10,000 declared, ~0.8%/s due, in-claim", ""),
    ):
        if key in r:
            lines.append(f"| {label} | {_lag(r[key], limit_ms=limits.get(burst))} |")
    for key in ("ours_lag_1_every-second_redis", "ours_lag_10000_spread_redis"):
        if key in r and "rss_mib" in r[key]:
            lines.append(f"| ours: worker RSS with {r[key]['schedules']} schedule(s) (MiB) | {r[key]['rss_mib']} |")
    for key, label in (
        ("ours_takeover_sigterm", "SIGTERM"),
        ("ours_takeover_kill9", "kill -9"),
        ("ours_takeover_kill9_fast", "kill -9 with fast_takeover=250"),
    ):
        if key in r:
            lines.append(
                f"| ours: takeover after {label}, lock_ttl=2000 (p50/p99/max ms) | {_lag(r[key], 'takeover_ms')} |"
            )
    for key, label in (
        ("ours_cost_idle_ttl2000", "idle, lock_ttl=2000"),
        ("ours_cost_busy_ttl2000", "busy (100/s), lock_ttl=2000"),
        ("ours_cost_idle_default", "idle, default lock_ttl=15000"),
    ):
        c = g(key) or {}
        if "error" in c:
            lines.append(f"| ours: Redis cost {label} | error: {c['error']} |")
        elif c:
            lines.append(
                f"| ours: Redis cmds/s {label}: leader / each follower | {c['leader_cmds_per_s']} / "
                f"{c['follower_cmds_per_s']} |"
            )
            lines.append(
                f"| ours: CPU {label}: leader thread / leader process / followers (% of a core) | "
                f"{c['leader_thread_cpu_pct']} / {c['leader_process_cpu_pct']} / {c['follower_process_cpu_pct']} |"
            )
    d = g("ours_duplicates_after_lease_deletion") or {}
    if d:
        lines.append(f"| ours: after one lease-key deletion | {json.dumps(d)} |")
    for key in ("peers_lag_1", "peers_lag_1000"):
        p = g(key) or {}
        if "error" in p:
            lines.append(f"| {key} | error: {p['error']} |")
        elif p:
            burst = limits.get(str(p["count"]))
            lines.append(
                f"| dramatiq-crontab: fire lag, {p['count']} at a minute tick | "
                f"{_lag(p, 'crontab_lag_ms', limit_ms=burst)} |"
            )
            lines.append(
                f"| periodiq: fire lag, {p['count']} at a minute tick | {_lag(p, 'periodiq_lag_ms', limit_ms=burst)} |"
            )
            if "periodiq_two_instances_enqueues_per_tick" in p:
                lines.append(
                    "| periodiq: enqueues of one tick with two instances | "
                    f"{p['periodiq_two_instances_enqueues_per_tick']} |"
                )
    for key in (
        "crontab_takeover_sigterm",
        "crontab_takeover_kill9",
        "crontab_duplicates_after_lock_deletion",
        "crontab_cost",
    ):
        if key in r:
            lines.append(f"| {key} | {json.dumps(r[key])} |")
    ratios = _ratios(r)
    if ratios:
        lines += ["", "Ratios (peer / ours, same run):", ""] + [f"- {line}" for line in ratios]
    return "\n".join(lines) + "\n"


def _ratios(r: dict[str, Any]) -> list[str]:
    out = []

    def num(path: list[str]) -> float | None:
        v: Any = r
        for p in path:
            if not isinstance(v, dict) or p not in v:
                return None
            v = v[p]
        return float(v) if isinstance(v, (int, float)) else None

    pairs = [
        (
            "fire lag p50, 1 schedule, crontab/ours",
            ["peers_lag_1", "crontab_lag_ms", "p50"],
            ["ours_lag_1_every-second_redis", "lag_ms", "p50"],
        ),
        (
            "fire lag p50, 1 schedule, periodiq/ours",
            ["peers_lag_1", "periodiq_lag_ms", "p50"],
            ["ours_lag_1_every-second_redis", "lag_ms", "p50"],
        ),
        (
            "fire lag p99, 1,000 at once, crontab/ours",
            ["peers_lag_1000", "crontab_lag_ms", "p99"],
            ["ours_lag_1000_every-second_redis", "lag_ms", "p99"],
        ),
        (
            "fire lag p99, 1,000 at once, periodiq/ours",
            ["peers_lag_1000", "periodiq_lag_ms", "p99"],
            ["ours_lag_1000_every-second_redis", "lag_ms", "p99"],
        ),
        (
            "takeover after SIGTERM, crontab/ours (median)",
            ["crontab_takeover_sigterm", "takeover_ms"],
            ["ours_takeover_sigterm", "takeover_ms", "p50"],
        ),
        (
            "takeover after kill -9, crontab/ours (median)",
            ["crontab_takeover_kill9", "takeover_ms"],
            ["ours_takeover_kill9", "takeover_ms", "p50"],
        ),
    ]
    for label, peer, mine in pairs:
        a, b = num(peer), num(mine)
        if a is not None and b:
            out.append(f"{label}: {a:.1f} / {b:.1f} = {a / b:.1f}x")
    standby = (r.get("crontab_cost") or {}).get("standby_cmds_per_s")
    follower = (r.get("ours_cost_idle_default") or {}).get("follower_cmds_per_s")
    if standby and follower and sum(follower):
        a, b = sum(standby) / len(standby), sum(follower) / len(follower)
        out.append(
            "Redis cmds/s of a standby: crontab (15 s polling window) / ours (default lease): "
            f"{a:.2f} / {b:.3f} = {a / b:.0f}x"
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
