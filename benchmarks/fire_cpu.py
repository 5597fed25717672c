"""CPU time of the leader's thread per 1,000 ticks of a burst: the fire
path (``Firing._fire_due``) and building ahead (``TickQueue.build_ahead``),
beside the burst's p99 lag and the bare Redis limit (``benchmarks.bursts``).
Thread CPU time is far less sensitive to a loaded machine than wall time.

Run: ``.venv/bin/python -m benchmarks.fire_cpu [--schedules 1000] [--seconds 5]``
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks import bursts
from dramatiq_cron_middleware.leader import firing


def measure(*, schedules: int, seconds: float) -> dict[str, Any]:
    """Run one in-claim burst case with the two methods timed."""
    fire: list[float] = []
    ahead: list[float] = []
    fire_due, build_ahead = firing.Firing._fire_due, firing.TickQueue.build_ahead

    def timed_fire(self: Any, term: Any) -> None:
        started = time.thread_time()
        try:
            fire_due(self, term)
        finally:
            fire.append((time.thread_time() - started) * 1000)

    def timed_ahead(self: Any, now: int) -> None:
        started = time.thread_time()
        try:
            build_ahead(self, now)
        finally:
            ahead.append((time.thread_time() - started) * 1000)

    firing.Firing._fire_due = timed_fire  # type: ignore[method-assign]
    firing.TickQueue.build_ahead = timed_ahead  # type: ignore[method-assign]
    try:
        r = bursts.run_case(schedules=schedules, spread=False, same_redis=True, seconds=seconds)
    finally:
        firing.Firing._fire_due = fire_due  # type: ignore[method-assign]
        firing.TickQueue.build_ahead = build_ahead  # type: ignore[method-assign]
    thousands = max(r["messages"], 1) / 1000
    return {
        "schedules": schedules,
        "messages": r["messages"],
        "p99_ms": r["lag_ms"].get("p99"),
        "limit_ms": r["limit_ms"],
        "fire_cpu_ms_per_1000": round(sum(fire) / thousands, 1),
        "build_ahead_cpu_ms_per_1000": round(sum(ahead) / thousands, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(measure(schedules=args.schedules, seconds=args.seconds)))


if __name__ == "__main__":
    main()
