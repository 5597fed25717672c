"""The Sentinel soak: random network partitions of a Sentinel group, then the verdict.

Run ``python -m tests.chaos.soak_sentinel --minutes 15`` from the repository
root.  It starts a master, two replicas and three sentinels, each behind a
proxy of its own (tests/support/redis_topologies.py ``SplitSentinelGroup``),
and two ``dramatiq`` instances of tests/apps/cronapp.py on the
``redis+sentinel://`` URL (durable claims on: the default on Sentinel).
Every round cuts the six nodes and the two instances into two random sides
(half of them a split brain on purpose: the master on one side, the
sentinel majority on the other, as in issue 28; the rest any cut), holds the cut for 2-15 s,
heals it, waits until the sentinels agree on one master that every other
node follows, and until ticks fire again.  At the end every
(schedule, tick) is judged: no duplicate, no loss (the cuts' ticks are
caught up after each heal; no outage is declared), no early fire, and no
traceback in either instance's log.  The seed is printed; exits 1 when a
guarantee failed.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import redis

from tests.support.instances import History, Instance, kill_all, now_ms, wait_for
from tests.support.redis_topologies import SplitSentinelGroup

TTL_MS = 2000
SCHEDULES = ["tick_0", "tick_1"]
LEASE = "{dramatiq-cron}:lease"


def settled(group: SplitSentinelGroup) -> str | None:
    """The master's name once a sentinel majority names it, it says it is a
    master and every other data node replicates from it with its link up;
    else None."""
    try:
        name = group.master_name()
        if name is None or group.role(name) != "master":
            return None
        master_port = group.proxies[name].port
        for other, process in group.nodes.items():
            if other == name or other.startswith("S"):
                continue
            info = process.client().info("replication")
            if info.get("role") != "slave" or info.get("master_link_status") != "up":
                return None
            if int(info.get("master_port", 0)) != master_port:
                return None
        return name
    except redis.RedisError:
        return None


def describe(group: SplitSentinelGroup) -> str:
    """What each sentinel names and what each data node says it is, for a
    settle that never came."""
    by_port = {proxy.port: name for name, proxy in group.proxies.items()}
    parts = []
    for name, process in group.nodes.items():
        try:
            if name.startswith("S"):
                found = process.client().sentinel_get_master_addr_by_name(group.service)
                parts.append(f"{name} names {by_port.get(int(found[1]), found) if found else None}")
            else:
                info = process.client().info("replication")
                follows = by_port.get(int(info.get("master_port", 0)), "-")
                parts.append(f"{name} {info.get('role')} of {follows} link {info.get('master_link_status', '-')}")
        except redis.RedisError as exc:
            parts.append(f"{name} unreachable ({exc})")
    return "; ".join(parts)


def wait_settled(group: SplitSentinelGroup, *, what: str) -> str:
    """The master once :func:`settled`; the state is printed when it takes long."""
    try:
        return str(wait_for(lambda: settled(group), timeout=60, what=what))
    except AssertionError:
        print(f"soak: still waiting for {what}: {describe(group)}", flush=True)
    try:
        return str(wait_for(lambda: settled(group), timeout=240, what=what))
    except AssertionError:
        raise AssertionError(f"timed out after 300 s waiting for {what}: {describe(group)}") from None


def leader_side(group: SplitSentinelGroup, name: str, pair: list[Instance]) -> int | None:
    """Which instance of ``pair`` holds the lease, by the master's record."""
    try:
        pid = group.nodes[name].client().hget(LEASE, "pid")
    except redis.RedisError:
        return None
    if pid is None:
        return None
    for index, instance in enumerate(pair):
        if int(pid) in {instance.pid, *instance.worker_pids()}:
            return index
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the soak; 0 when every guarantee held."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.soak_sentinel", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="how long to cut and heal (default 15)")
    parser.add_argument("--seed", type=int, default=None, help="layout sequence seed (default: random, printed)")
    parser.add_argument("--out", default="soak-results", help="directory for soak-sentinel.json")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000
    rng = random.Random(seed)
    command = f"python -m tests.chaos.soak_sentinel --minutes {args.minutes:g} --seed {seed}"
    print(f"soak: {command}", flush=True)
    record_dir = tempfile.mkdtemp(prefix="cron-soak-sentinel-")
    history = History(record_dir)
    # The proxies stop by themselves after their lifetime: past the soak's end.
    group = SplitSentinelGroup(replicas=2, lifetime_s=args.minutes * 60 + 900)
    pair: list[Instance] = []
    layouts: Counter[str] = Counter()
    split_brains = 0
    try:
        group.start()
        env = {
            "DRAMATIQ_CRON_REDIS_URL": group.url(),
            "CRON_APP_RECORD": record_dir,
            "CRON_APP_TTL": str(TTL_MS),
            "CRON_APP_ACTORS": str(len(SCHEDULES)),
        }
        pair = [Instance(env, name=f"sentinel-soak-{i}").start() for i in range(2)]
        start = now_ms()
        wait_for(lambda: len([t for t in history.ticks() if t > start]) >= 3, timeout=60, what="the first ticks")
        began = time.monotonic()
        deadline = began + args.minutes * 60
        names = list(group.nodes)
        while time.monotonic() < deadline:
            master = wait_settled(group, what="one master every node follows")
            leader = leader_side(group, master, pair)
            if rng.random() < 0.5:
                # A split brain on purpose: the master and at most one
                # sentinel on one side, the other sentinels on the other,
                # the replicas anywhere.
                sentinels = [n for n in names if n.startswith("S")]
                one_side = {master, *rng.sample(sentinels, rng.randrange(2))}
                one_side |= {n for n in names if n[0] not in "S" and n != master and rng.random() < 0.5}
            else:
                one_side = {n for n in names if rng.random() < 0.5} or {rng.choice(names)}
                if one_side == set(names):
                    one_side.discard(rng.choice(names))
            sides: list[set[int]] = [set(), set()]
            placed = [rng.randrange(2) for _ in pair]
            for instance, side in zip(pair, placed, strict=True):
                sides[side] |= {instance.pid, *instance.worker_pids()}
            # Side 0 holds ``one_side``; a split brain: the master on one
            # side, a sentinel majority (two of three) on the other.
            with_master = [n for n in names if n.startswith("S") and (n in one_side) == (master in one_side)]
            brain = len(with_master) < 2
            split_brains += brain
            layout = "".join(sorted(one_side)) + "|" + "".join(str(p) for p in placed) + f" (leader i{leader})"
            layouts["split brain" if brain else "no split brain"] += 1
            group.split(one_side, pids=(sides[0], sides[1]))
            hold = rng.uniform(2.0, 15.0)
            time.sleep(hold)  # the cut's length is part of the sequence
            group.heal()
            healed = now_ms()
            master = wait_settled(group, what="the sentinels to agree after the heal")
            wait_for(
                lambda: len([t for t in history.ticks() if t > healed + 3 * TTL_MS]) >= 2,  # noqa: B023 - called at once
                timeout=120,
                what="ticks after the heal",
            )
            elapsed = (time.monotonic() - began) / 60
            print(
                f"soak: {elapsed:5.1f} min  rounds={sum(layouts.values()):3d}  split brains={split_brains:3d}  "
                f"cut={layout:<28} {hold:4.1f} s  master now {master}  enqueues={len(history.enqueues())}",
                flush=True,
            )
        end = now_ms() - 1500
        verdict = history.judge(schedules=SCHEDULES, start_ms=start, end_ms=end, outages=[])
        logs = [instance.log() for instance in pair]
    finally:
        kill_all(pair)
        group.close()
    tracebacks = sum(log.count("Traceback") for log in logs)
    figures = {
        "command": command,
        "seed": seed,
        "minutes": round((time.monotonic() - began) / 60, 1),
        "rounds": sum(layouts.values()),
        "split_brains": split_brains,
        "ticks_expected": verdict.expected,
        "duplicates": len(verdict.duplicates),
        "losses": len(verdict.losses),
        "early": len(verdict.early),
        "tracebacks": tracebacks,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak-sentinel.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2), flush=True)
    if verdict.duplicates or verdict.losses or verdict.early or tracebacks:
        print(f"soak: FAILED: {verdict.summary()}", flush=True)
        return 1
    print("soak: every guarantee held", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
