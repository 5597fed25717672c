"""Sentinel partitions with durable claims on (the default on Sentinel):
real redis-server and redis-sentinel processes, each behind a proxy of its
own, and two dramatiq instances, split as a network partition splits them.

The layout of issue 28: {A, M, R2, S1} | {B, R1, S2, S3}, A leading.  The
sentinel majority promotes R1; R2 still acknowledges A's ``WAIT 1``.  Before
the sentinel check, A kept firing on M, and after the heal R1's older ledger
made B fire every tick of the cut again: 50 of 50 (schedule, tick) pairs
enqueued twice.  Now A's writes are not confirmed (one sentinel of three
names M), so A enqueues nothing of the cut and steps down; B cannot confirm
on R1 until a replica follows it (after the heal), then catches the cut's
ticks up, once each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.chaos.cluster import PROFILE
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_topologies import SplitSentinelGroup

pytestmark = pytest.mark.chaos

TTL_MS = 2000
#: The partition's length: the issue's 15 s in the full profile.
PARTITION_S = 15.0 if PROFILE == "full" else 8.0
LEASE = "{dramatiq-cron}:lease"
SCHEDULES = ["tick_0", "tick_1"]


@pytest.fixture
def split_group() -> Iterator[SplitSentinelGroup]:
    """M, R1, R2 and S1-S3, each behind its own proxy."""
    group = SplitSentinelGroup(replicas=2)
    try:
        yield group.start()
    finally:
        group.close()


def test_a_partition_leaving_the_leader_a_replica_but_not_the_sentinel_majority_fires_no_tick_twice(
    split_group: SplitSentinelGroup, instances: Callable[..., Instance], history: History, record_dir: str
) -> None:
    group = split_group
    env = {
        "DRAMATIQ_CRON_REDIS_URL": group.url(),
        "CRON_APP_RECORD": record_dir,
        "CRON_APP_TTL": str(TTL_MS),
        "CRON_APP_ACTORS": str(len(SCHEDULES)),
    }
    pair = [instances(env), instances(env)]
    start = history.first_tick()
    wait_for(lambda: len([t for t in history.ticks() if t > start]) >= 3, timeout=60, what="ticks")
    master = group.nodes["M"].client()
    leader_pid = int(wait_for(lambda: master.hget(LEASE, "pid"), timeout=30, what="a leader"))
    a = next(i for i in pair if leader_pid in i.worker_pids())
    b = next(i for i in pair if i is not a)

    def pids(instance: Instance) -> set[int]:
        return {instance.pid, *instance.worker_pids()}

    group.split({"M", "R2", "S1"}, pids=(pids(a), pids(b)))
    cut = now_ms()
    wait_for(lambda: group.master_name() == "R1", timeout=60, what="the sentinel majority to promote R1")
    time.sleep(max(0.0, PARTITION_S - (now_ms() - cut) / 1000))  # the declared partition
    # A's side never had the sentinel majority: it confirms nothing of the cut.
    fired_by_a = [e for e in history.enqueues() if e.pid in pids(a) and e.tick_ms > cut + 1000]
    group.heal()
    healed = now_ms()
    wait_for(lambda: group.role("M") == "slave", timeout=60, what="the sentinels to demote the old master")
    demoted = now_ms()
    # Ticks well after the demotion come from a leader on R1, which caught
    # up (or re-fired) the cut's ticks before them.
    wait_for(
        lambda: len([t for t in history.ticks() if t > demoted + 3 * TTL_MS]) >= 3,
        timeout=120,
        what="ticks from a leader on the new master",
    )
    resumed = min(e.at for e in history.enqueues() if e.tick_ms > cut + 1000) * 1000

    print(f"the cut's ticks caught up from {(resumed - healed) / 1000:.1f} s after the heal")
    end = now_ms() - 1500
    verdict = history.judge(schedules=SCHEDULES, start_ms=start, end_ms=end, outages=[])
    assert not verdict.duplicates, verdict.summary()
    assert not fired_by_a, (len(fired_by_a), verdict.summary())
    # The cut's ticks were caught up once each after the heal.
    assert not verdict.losses, verdict.summary()
    assert resumed > healed, (resumed, healed)
    for instance in pair:
        assert "Traceback" not in instance.log(), instance.log()[-4000:]
