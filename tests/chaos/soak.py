"""The soak: the mixed fault sequence for a chosen duration, then the figures.

Run ``python -m tests.chaos.soak --minutes 30`` from the repository root.
It starts a lease Redis (behind the fault proxy, with an append-only file),
a broker Redis and three ``dramatiq`` instances of tests/apps/cronapp.py
(one of them with a wall clock that jumps an hour ahead), injects a random
fault (seeded, printed) every few seconds, sends a plain job between faults,
prints progress, and finally judges the whole history and writes
``soak.json`` and ``soak.md`` to ``--out``.  Exits 1 on any duplicate, loss
outside a declared outage, traceback, ERROR line or unprocessed job.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from tests.support.faketime import WallClockShim
from tests.support.instances import now_ms, wait_for

from .cluster import Cluster, Report, assert_sound
from .faults import FAULTS, MIXABLE

#: The soak's lease Redis has a replica: every mixable fault, and the
#: failover after replication lag.
KINDS = [*MIXABLE, "replication_lag_master_kill"]


def markdown(report: Report, *, command: str, seed: int, minutes: float) -> str:
    """The summary as a Markdown table, for docs/reliability.md."""
    d = report.as_dict()
    rows = [
        ("Command", f"`{command}`"),
        ("Seed", str(seed)),
        ("Duration", f"{minutes:.1f} min"),
        ("Faults injected", str(len(report.faults))),
        ("Faults by kind", ", ".join(f"{k} {v}" for k, v in sorted(d["faults_by_kind"].items()))),
        ("Ticks expected", str(d["ticks_expected"])),
        ("Duplicates", str(d["duplicates"])),
        ("Losses outside declared outages", str(d["losses_outside_outages"])),
        ("Declared outage (ledger wiped on purpose)", f"{d['declared_outage_ms'] / 1000:.1f} s"),
        ("Worst takeover gap (silence beyond one period)", f"{d['worst_takeover_gap_ms']} ms"),
        ("Fire lag p50 / p99 / max", f"{d['lag_p50_ms']} / {d['lag_p99_ms']} / {d['lag_max_ms']} ms"),
        (
            "Cron WARNING lines / ERROR lines / tracebacks",
            f"{d['cron_warnings']} / {d['cron_errors']} / {d['tracebacks']}",
        ),
        ("Plain jobs sent / processed", f"{d['jobs_sent']} / {d['jobs_processed']}"),
    ]
    lines = ["| Figure | Value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    lines += ["", "| Fault kind | Worst gap (ms) |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(d["gap_ms_by_kind"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the soak; 0 when every guarantee held."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to inject faults (default 30)")
    parser.add_argument("--seed", type=int, default=None, help="fault sequence seed (default: random, printed)")
    parser.add_argument("--out", default="soak-results", help="directory for soak.json and soak.md")
    args = parser.parse_args(argv)
    # Stopped early (SIGTERM, or Ctrl-C), still stop every process started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000
    rng = random.Random(seed)
    command = f"python -m tests.chaos.soak --minutes {args.minutes:g} --seed {seed}"
    print(f"soak: {command}", flush=True)
    shim = WallClockShim()
    try:
        with Cluster(size=3, proxy=True, persistence=True, replica=True, per_instance={0: shim.env()}) as cluster:
            start = cluster.first_tick()
            began = time.monotonic()
            deadline = began + args.minutes * 60
            while time.monotonic() < deadline:
                if shim.offset_s == 0 and time.monotonic() - began >= 30:
                    shim.step_to(3600)  # one instance's wall clock jumps an hour ahead
                kind = rng.choice(KINDS)
                FAULTS[kind](cluster)
                cluster.wait_fired_after(now_ms())
                n = cluster.send_job()
                wait_for(lambda: n in cluster.jobs_done(), timeout=60, what=f"plain job {n}")  # noqa: B023 - called at once
                quiet = rng.uniform(1.0, 5.0)
                time.sleep(quiet)  # the quiet spell between faults is part of the sequence
                elapsed = (time.monotonic() - began) / 60
                print(
                    f"soak: {elapsed:5.1f} min  faults={len(cluster.faults):4d}  last={kind:<25} "
                    f"enqueues={len(cluster.history.enqueues())}",
                    flush=True,
                )
            report = cluster.judge(start_ms=start)
            minutes = (time.monotonic() - began) / 60
    finally:
        shim.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"command": command, "seed": seed, "minutes": round(minutes, 1), **report.as_dict()}
    (out / "soak.json").write_text(json.dumps(figures, indent=2) + "\n")
    (out / "soak.md").write_text(markdown(report, command=command, seed=seed, minutes=minutes))
    print(json.dumps(figures, indent=2), flush=True)
    print(f"soak: summary written to {os.path.abspath(out)}", flush=True)
    try:
        assert_sound(report)
    except AssertionError as exc:
        print(f"soak: FAILED: {exc}", flush=True)
        return 1
    print("soak: every guarantee held", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
