"""Redis Cluster: three real masters (``redis-server --cluster-enabled``).
Every key a script touches shares the ``{prefix}`` hash tag, so the lease
and claim scripts run on the node owning that slot; leadership fails over
between instances without a duplicate."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_topologies import ClusterGroup

SCHEDULE = "tick_0"
LEASE = "{dramatiq-cron}:lease"


def _lease_pid(cluster: ClusterGroup) -> int | None:
    from redis.cluster import ClusterNode, RedisCluster

    client = RedisCluster(
        startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes], decode_responses=True
    )
    try:
        pid = client.hget(LEASE, "pid")
    finally:
        client.close()
    return int(pid) if pid else None


def test_on_a_three_master_cluster_leadership_fails_over_without_a_duplicate(
    cluster: ClusterGroup, instances: Callable[..., Instance], history: History, record_dir: str
) -> None:
    env = {"DRAMATIQ_CRON_REDIS_URL": cluster.url(), "CRON_APP_RECORD": record_dir, "CRON_APP_TTL": "2000"}
    group = [instances(env) for _ in range(2)]
    first = wait_for(lambda: _lease_pid(cluster), timeout=60, what="a leader")
    start = now_ms()
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > start]) >= 2, timeout=60, what="two ticks")

    # kill -9 the leader's instance: the other takes over once the lease expires.
    victim = next(i for i in group if first in i.worker_pids())
    victim.kill9()
    wait_for(lambda: (p := _lease_pid(cluster)) and p != first, timeout=60, what="the other instance to lead")
    resumed = now_ms()
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > resumed]) >= 2, timeout=60, what="ticks again")

    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates, verdict.summary()
    assert not verdict.losses, verdict.summary()  # the new leader caught up the handover gap
    survivor = next(i for i in group if i is not victim)
    assert "Traceback" not in survivor.log(), survivor.log()[-3000:]
    assert survivor.terminate() == 0
