"""Every fault kind on its own, then all of them mixed, judged Jepsen-style.

A cluster is a lease Redis (behind the fault proxy, with an append-only
file), a broker Redis no fault touches, and two ``dramatiq`` instances
firing a per-second schedule with a 1.5 s lease.  A scenario injects its
fault (three times in the full profile), waits until the cluster fires
again, then judges every tick from its start to two seconds past its last
fault:

- a tick enqueued more than once is a duplicate: always a failure;
- a tick never enqueued is a loss: a failure, except inside a declared
  outage.  Only faults that wipe the ledger on purpose (FLUSHALL, FLUSHDB,
  a Redis restarted without its data) declare one, from a period before
  the wipe to the first tick fired after it.  Everything else (stalls,
  partitions, restarts with persistence, a dead or frozen leader) must lose
  nothing: the ticks it delays are caught up, late, once each.

The short profile (default) runs every scenario on one shared cluster, so
the group fits CI; the full profile gives each its own.  Takeover gaps and
fire lag are printed (run with ``-s``), not asserted.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator

import pytest

from tests.support.instances import now_ms

from .cluster import PROFILE, Cluster, Report, assert_sound
from .faults import FAULTS, MIXABLE

pytestmark = pytest.mark.chaos

REPEATS = 3 if PROFILE == "full" else 1


def run_faults(cluster: Cluster, kinds: list[str]) -> Report:
    """Inject ``kinds`` in order, each after the cluster fired again, and
    judge the scenario's window."""
    mark = cluster.mark()
    cluster.wait_fired_after(now_ms())
    start = now_ms()
    cluster.wait_fired_after(start)
    for kind in kinds:
        FAULTS[kind](cluster)
        cluster.wait_fired_after(now_ms())
    return cluster.judge(start_ms=start, since=mark)


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[Cluster | None]:
    """One cluster for every scenario in the short profile; None in the
    full profile, where each scenario starts its own."""
    if PROFILE == "full":
        yield None
        return
    with Cluster(proxy=True, persistence=True) as cluster:
        yield cluster


@pytest.mark.parametrize("kind", list(FAULTS))
def test_no_duplicate_and_no_loss_outside_declared_outages_under(kind: str, shared_cluster: Cluster | None) -> None:
    """Given two instances firing every second, when the fault strikes,
    then no tick is enqueued twice, none is lost outside a declared outage,
    no traceback or ERROR is logged, warnings stay about one per state
    change, and plain jobs keep running through it."""
    if shared_cluster is None:
        with Cluster(proxy=True, persistence=True) as cluster:
            report = run_faults(cluster, [kind] * REPEATS)
    else:
        report = run_faults(shared_cluster, [kind] * REPEATS)
    print(f"\n[chaos] {kind}: {report.line()}")
    assert_sound(report)


def test_a_wall_clock_jump_on_the_workers_changes_nothing() -> None:
    """Given two instances whose own ``time.time`` jumps, one an hour
    forward and one an hour back, a few seconds after boot (a per-process
    fake: the machine's clock is untouched), when the leader is killed so
    that the other one leads with its jumped clock, then every tick still
    fires exactly once, on time.  This proves the lease rests on the
    monotonic clock and ticks on Redis time, not on the workers' wall
    clocks; it does not cover a jump of the Redis host's clock."""
    jumps = {0: {"CRON_APP_WALL_CLOCK_JUMP": "3:3600"}, 1: {"CRON_APP_WALL_CLOCK_JUMP": "3:-3600"}}
    with Cluster(per_instance=jumps) as cluster:
        mark = cluster.mark()
        start = cluster.first_tick()
        # Both clocks have jumped 3 s after boot; let the leader fire a few
        # ticks on its jumped clock before taking it away.
        cluster.wait_fired_after(start + 4000)
        FAULTS["leader_kill9"](cluster)
        report = cluster.judge(start_ms=start, since=mark)
    print(f"\n[chaos] wall_clock_jump: {report.line()}")
    assert_sound(report)
    assert report.lag_ms(0.99) < 60_000, "ticks followed a jumped wall clock"


def test_mixed_faults_in_a_random_sequence_never_duplicate_or_lose() -> None:
    """Given three instances, when faults of every kind strike in a random
    (seeded, printed, reproducible) sequence, then the whole history has no
    duplicate and no loss outside the declared outages."""
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    count = 24 if PROFILE == "full" else 5
    kinds = random.Random(seed).choices(MIXABLE, k=count)
    print(f"\n[chaos] mixed: CHAOS_SEED={seed} faults={kinds}")
    with Cluster(size=3, proxy=True, persistence=True) as cluster:
        report = run_faults(cluster, kinds)
    print(f"[chaos] mixed: CHAOS_SEED={seed} {report.line()}")
    assert_sound(report)
