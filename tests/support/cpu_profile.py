"""A pytest plugin that records each test's CPU time (measuring, not testing).

``pytest -p tests.support.cpu_profile`` with ``CPU_PROFILE=DIR`` appends
one JSON line per test to ``DIR/<xdist worker>.jsonl``: its node id, its
xdist group, its start (epoch seconds), the wall time and the user+sys CPU
of the pytest process plus the children it reaped (redis-servers, dramatiq
processes, browsers) over setup, call and teardown ("cpu"), and of the
pytest process alone ("self").  ``python -m tests.support.cpu_profile DIR``
prints the totals, the top tests and the longest xdist groups.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.instances import forked_cpu


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total + forked_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    out = os.environ.get("CPU_PROFILE")
    cpu, own, wall, start = _cpu(), _self_cpu(), time.monotonic(), time.time()
    yield
    if not out:
        return
    marker = item.get_closest_marker("xdist_group")
    record = {
        "id": item.nodeid,
        "group": marker.args[0] if marker and marker.args else None,
        "cpu": round(_cpu() - cpu, 3),
        "self": round(_self_cpu() - own, 3),
        "wall": round(time.monotonic() - wall, 3),
        "start": round(start, 3),
    }
    Path(out).mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(out) / f"{worker}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def main(folder: str, top: int = 25) -> None:
    records = [json.loads(line) for path in Path(folder).glob("*.jsonl") for line in path.open()]
    cpu, wall = sum(r["cpu"] for r in records), sum(r["wall"] for r in records)
    print(f"{len(records)} tests, CPU {cpu:.0f} s, wall (summed over workers) {wall:.0f} s")
    files: dict[str, float] = {}
    groups: dict[str, list[float]] = {}
    for r in records:
        path = r["id"].split("::")[0]
        files[path] = files.get(path, 0) + r["cpu"]
        if r["group"]:
            g = groups.setdefault(r["group"], [0.0, 0.0])
            g[0] += r["cpu"]
            g[1] += r["wall"]
    print(f"\ntop {top} tests by CPU (s):  cpu  self  wall")
    for r in sorted(records, key=lambda r: -r["cpu"])[:top]:
        print(f"{r['cpu']:7.1f} {r.get('self', 0):5.1f} {r['wall']:6.1f}  {r['id']}")
    own = sorted(records, key=lambda r: -r.get("self", 0))[:top]
    print(f"\ntop {top} tests by the pytest process's own CPU (s):  self  wall")
    for r in own:
        print(f"{r.get('self', 0):7.1f} {r['wall']:6.1f}  {r['id']}")
    print("\ntop files by CPU (s)")
    for path, cpu in sorted(files.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{cpu:7.1f}  {path}")
    print("\nlongest xdist groups (cpu, wall s)")
    for name, (cpu, wall) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"{cpu:7.1f} {wall:6.1f}  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:2], *(int(a) for a in sys.argv[2:3]))
