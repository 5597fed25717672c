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

The short profile (default) runs the scenarios on a shared cluster (one
per test process: the normal test run splits them into three groups,
tests/conftest.py), so they fit CI; the full profile gives each its own.  Takeover gaps and
fire lag are printed (run with ``-s``), not asserted.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator

import pytest

from tests.support.faketime import WallClockShim
from tests.support.instances import now_ms, wait_for

from .cluster import PROFILE, Cluster, Report, assert_sound
from .faults import FAULTS, KNOWN_BUGS, MIXABLE, NEEDS_OWN_CLUSTER

pytestmark = pytest.mark.chaos

REPEATS = 3 if PROFILE == "full" else 1


#: Faults with a scenario of their own below, which also judges them.
HANDOVERS = {"leader_sigterm": 5 if PROFILE == "full" else 1, "leader_group_sigterm": 5}


def _scenarios() -> list[object]:
    out: list[object] = []
    for kind in FAULTS:
        if kind in NEEDS_OWN_CLUSTER or kind in HANDOVERS:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[kind])] if kind in KNOWN_BUGS else []
        out.append(pytest.param(kind, marks=marks, id=kind))
    return out


def run_faults(cluster: Cluster, kinds: list[str], *, runs: bool = False) -> Report:
    """Inject ``kinds`` in order, each after the cluster fired again, and
    judge the scenario's window (from the actors' runs with ``runs``)."""
    mark = cluster.mark()
    cluster.wait_fired_after(now_ms())
    start = now_ms()
    cluster.wait_fired_after(start)
    for kind in kinds:
        FAULTS[kind](cluster)
        cluster.wait_fired_after(now_ms())
    return cluster.judge(start_ms=start, since=mark, runs=runs)


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[Cluster | None]:
    """One cluster for every scenario in the short profile; None in the
    full profile, where each scenario starts its own."""
    if PROFILE == "full":
        yield None
        return
    with Cluster(proxy=True, persistence=True) as cluster:
        yield cluster


@pytest.mark.parametrize("kind", _scenarios())
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


def test_replication_lag_then_a_master_kill_fires_no_tick_twice() -> None:
    """Given a lease Redis with a replica (claims durable by default), when
    replication is held back past the lease and the master is then killed
    and its replica promoted, then the ticks claimed in the lag (never
    acknowledged, so never enqueued) fire once after the failover."""
    with Cluster(proxy=True, persistence=True, replica=True) as cluster:
        report = run_faults(cluster, ["replication_lag_master_kill"] * REPEATS)
    print(f"\n[chaos] replication_lag_master_kill: {report.line()}")
    assert_sound(report)


def test_a_wall_clock_jump_on_the_workers_changes_nothing() -> None:
    """Given two instances on wall-clock shims (every reader of the
    process's wall clock moves, whatever bound ``time.time`` at import; the
    machine's clock is untouched), when once they fire one clock jumps an
    hour forward and the other an hour back, and the leader is killed so
    that the other one leads with its jumped clock, then every tick still
    fires exactly once, on time.  This proves the lease rests on the
    monotonic clock and ticks on Redis time, not on the workers' wall
    clocks; it does not cover a jump of the Redis host's clock."""
    ahead, behind = WallClockShim(), WallClockShim()
    try:
        with Cluster(per_instance={0: ahead.env(), 1: behind.env()}) as cluster:
            mark = cluster.mark()
            start = cluster.first_tick()
            ahead.step_to(3600)
            behind.step_to(-3600)
            # Let the leader fire a few ticks on its jumped clock before
            # taking it away.
            cluster.wait_fired_after(start + 4000)
            FAULTS["leader_kill9"](cluster)
            report = cluster.judge(start_ms=start, since=mark)
    finally:
        ahead.close()
        behind.close()
    print(f"\n[chaos] wall_clock_jump: {report.line()}")
    assert_sound(report)
    assert report.lag_ms(0.99) < 60_000, "ticks followed a jumped wall clock"


def test_a_leader_whose_wall_clock_is_off_by_a_minute_loses_no_run_to_max_age() -> None:
    """Given actors with ``max_age`` 20 s, consumers on the machine's clock
    and a leader-only instance, when that instance's wall clock steps a
    minute back and it takes the lease (graceful handovers), then every
    tick runs once, judged from the actors' runs: the first ticks after
    each takeover are built at the fire, and must be stamped by the
    scheduler's clock, not the leader host's."""
    with Cluster(leader_wall_clock=True, env={"CRON_APP_MAX_AGE": "20000"}) as cluster:
        report = run_faults(cluster, ["leader_wall_clock_off"] * REPEATS, runs=True)
    print(f"\n[chaos] leader_wall_clock_off: {report.line()}")
    assert_sound(report)


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


@pytest.mark.parametrize(("kind", "times"), list(HANDOVERS.items()))
def test_the_lease_is_released_within_a_second_of_sigterm(
    kind: str, times: int, shared_cluster: Cluster | None
) -> None:
    """Given a leader, when its instance gets SIGTERM (the whole process
    group at once, as systemd's control-group stop does, so each worker
    gets a second SIGTERM forwarded by dramatiq; or the main process only,
    as docker stop does), then within one second the lease key is gone or
    held by another candidate, every time, and the handover is sound.
    The takeover gap (release to a follower leading; the goal is at most
    100 ms) is printed, not asserted."""
    if shared_cluster is None:
        with Cluster(proxy=True, persistence=True) as cluster:
            report = run_faults(cluster, [kind] * times)
    else:
        report = run_faults(shared_cluster, [kind] * times)
    releases = [f.figures["release_ms"] for f in report.faults]
    gaps = [f.figures["takeover_gap_ms"] for f in report.faults]
    print(f"\n[chaos] {kind} x{times}: release_ms={releases} takeover_gap_ms={gaps}")
    assert len(releases) == times
    assert max(releases) < 1000, f"the lease outlived a SIGTERM by more than a second: {releases} ms"
    assert_sound(report)


def test_eviction_pressure_never_duplicates_and_never_stops_the_scheduler() -> None:
    """Given a lease Redis with ``maxmemory-policy allkeys-lru``, every
    worker process warns once at boot that the policy can evict the
    scheduler's keys.  When a filler client then pushes the memory past a
    cap for several seconds, so the epoch counter, the ledger and the lease are
    evicted again and again, the leader keeps scheduling through it (an
    eviction is not a failover: no failover delay), logs about one WARNING
    per state change, and nothing is ever enqueued twice; only ticks in the
    pressure span may be lost (the ledger was destroyed).  Then, under
    ``volatile-lru`` (only keys with a TTL may go: the lease, batch
    records), the same pressure may lose nothing at all."""
    with Cluster(redis_extra=["--maxmemory-policy", "allkeys-lru"]) as cluster:
        policy_line = "has maxmemory-policy allkeys-lru"
        for instance in cluster.instances:
            wait_for(lambda: policy_line in instance.log(), timeout=60, what=f"{instance.name}'s policy warning")  # noqa: B023
        mark = cluster.mark()
        cluster.wait_fired_after(now_ms())
        start = now_ms()
        cluster.wait_fired_after(start)
        allkeys = []
        for _ in range(REPEATS):
            allkeys.append(FAULTS["eviction_pressure"](cluster))
            cluster.wait_fired_after(now_ms())
        cluster.client.config_set("maxmemory-policy", "volatile-lru")
        volatile = []
        for _ in range(REPEATS):
            volatile.append(FAULTS["eviction_pressure"](cluster))
            cluster.wait_fired_after(now_ms())
        report = cluster.judge(start_ms=start, since=mark)
        boots = {
            i.name: (i.log().count(policy_line), i.log().count("Worker process is ready")) for i in cluster.instances
        }
    for fault in allkeys + volatile:
        print(f"\n[chaos] eviction_pressure {fault.detail}: {fault.figures}")
    print(f"[chaos] eviction_pressure: {report.line()}")
    assert all(warned == booted for warned, booted in boots.values()), f"policy warnings per boot: {boots}"
    for fault in allkeys:
        assert fault.figures["ledger_evicted"] >= 2, f"the pressure did not evict the ledger again and again: {fault}"
        assert fault.figures["epoch_evicted"] >= 2, f"the pressure did not evict the epoch again and again: {fault}"
        assert fault.figures["fired_per_schedule_second"] >= 0.4, f"scheduling stopped under eviction: {fault}"
    for fault in volatile:
        assert fault.figures["lease_evicted"] >= 1, f"volatile-lru pressure never evicted the lease: {fault}"
        assert fault.figures["ledger_evicted"] == 0, f"volatile-lru evicted the ledger: {fault}"
    assert_sound(report, warnings_per_fault=6)


@pytest.fixture(scope="module")
def shimmed_cluster() -> Iterator[Cluster]:
    """Two instances whose lease Redis runs on a clock shim (libfaketime),
    shared by the clock-step scenarios."""
    with Cluster(shimmed_clock=True) as cluster:
        yield cluster


def test_a_forward_step_of_the_redis_clock_fires_nothing_early_and_silences_nothing(
    shimmed_cluster: Cluster,
) -> None:
    """Given a lease Redis on a clock shim, when its wall clock steps an
    hour forward for six seconds and back (an NTP step undone; every key
    with a TTL expires, so a leadership change is expected), then nothing
    is enqueued before its tick, nothing twice, nothing lost, and once the
    step is undone the schedules fire again within a few seconds."""
    cluster = shimmed_cluster
    mark = cluster.mark()
    cluster.wait_fired_after(now_ms())
    start = now_ms()
    cluster.wait_fired_after(start)
    resumes = []
    for _ in range(REPEATS):
        forward = FAULTS["redis_clock_forward"](cluster)
        cluster.wait_fired_after(forward.end_ms + 1000, timeout=10)
        resumes.append(now_ms() - forward.end_ms)
    report = cluster.judge(start_ms=start, since=mark)
    print(f"\n[chaos] redis_clock_forward: first fire after the undo (ms, tick 1 s after it)={resumes}")
    print(f"[chaos] redis_clock_forward: {report.line()}")
    assert max(resumes) < 4000, f"schedules stayed silent after the step was undone: {resumes} ms"
    assert_sound(report)


@pytest.fixture(scope="module")
def backward_step_run(shimmed_cluster: Cluster) -> tuple[Report, list[int]]:
    """The backward step (with a kill -9 of the leader) run once, judged,
    for the two tests below; returns the report and the takeover times."""
    cluster = shimmed_cluster
    mark = cluster.mark()
    start = now_ms()
    cluster.wait_fired_after(start)
    takeovers = []
    for _ in range(REPEATS):
        back = FAULTS["redis_clock_back"](cluster)
        takeovers.append(round(back.figures["takeover_ms"]))
        cluster.wait_fired_after(now_ms())
    report = cluster.judge(start_ms=start, since=mark)
    print(f"\n[chaos] redis_clock_back: takeover_ms (from the leader's last chance to renew)={takeovers}")
    print(f"[chaos] redis_clock_back: {report.line()}")
    return report, takeovers


def test_after_a_backward_step_of_the_redis_clock_a_follower_takes_over_by_its_own_clock(
    backward_step_run: tuple[Report, list[int]], shimmed_cluster: Cluster
) -> None:
    """Given a lease Redis on a clock shim, when its clock steps 40 s back
    with the leader frozen (the lease now lasts 40 s by Redis's clock) and
    the leader is killed, then a follower leads within a few leases by its
    own monotonic clock, not after the 40 s, and nothing fires early.
    Takeover times are printed (measured from the freeze, the leader's
    last chance to renew)."""
    report, takeovers = backward_step_run
    # The follower's blocking wait, stretched by the step on the server,
    # ends on its socket timeout (about a lease), and it deposes a lease
    # nobody renewed for a lease and an op timeout by its own clock: about
    # two and a half leases in all, against 40 s if it followed the key.
    assert max(takeovers) < 4 * shimmed_cluster.ttl_ms, f"takeover followed Redis's stepped clock: {takeovers} ms"
    assert not report.verdict.early, f"ticks enqueued early: {report.verdict.summary()}"


def test_a_backward_step_of_the_redis_clock_and_a_leader_change_repeat_no_tick(
    backward_step_run: tuple[Report, list[int]],
) -> None:
    """Given the run above (a 40 s backward step, a leader killed, the step
    undone), then no tick is enqueued twice, none is lost, and no
    traceback or ERROR is logged."""
    report, _ = backward_step_run
    assert_sound(report)
