"""Redis Sentinel: a real master, a replica and three sentinels on
loopback.  The scheduler follows the master through a failover, and the
first leader after it waits one lease before firing."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from redis.sentinel import Sentinel

from dramatiq_cron_middleware import CronConfigurationError
from dramatiq_cron_middleware.store.connection import describe, scheduler_clients
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_topologies import SentinelGroup

SCHEDULE = "tick_0"
LEASE = "{dramatiq-cron}:lease"


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    """Master, two replicas and three sentinels (redis-server --sentinel):
    the promoted replica still has one, so claims are confirmed after a
    failover (durable by default on Sentinel)."""
    group = SentinelGroup(replicas=2)
    try:
        yield group.start()
    finally:
        group.close()


def test_a_sentinel_url_or_client_gives_short_timeout_clients_on_the_master(sentinel_group: SentinelGroup) -> None:
    users_client = Sentinel(sentinel_group.addresses, socket_timeout=30).master_for(sentinel_group.service)
    for source in (sentinel_group.url(), users_client):
        client, blocking = scheduler_clients(source, op_timeout_ms=400, block_timeout_ms=2000)
        assert client.execute_command("ROLE")[0] == "master"
        assert client.connection_pool.connection_kwargs["socket_timeout"] == 0.4
        assert blocking.connection_pool.connection_kwargs["socket_timeout"] == 2.4
        assert describe(client).startswith("redis+sentinel://127.0.0.1:")
        client.close()
        blocking.close()


def test_leadership_resumes_on_the_new_master_after_a_failover_without_duplicates(
    sentinel_group: SentinelGroup, instances: Callable[..., Instance], history: History, record_dir: str
) -> None:
    env = {"DRAMATIQ_CRON_REDIS_URL": sentinel_group.url(), "CRON_APP_RECORD": record_dir, "CRON_APP_TTL": "2000"}
    instance = instances(env, processes=2)
    start = now_ms()
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > start]) >= 2, timeout=15, what="two ticks")
    old_port = sentinel_group.master_port()
    replica = sentinel_group.replica.client()
    # The replica has the lease: what a failover would hand the new master.
    wait_for(lambda: replica.hget(LEASE, "token"), timeout=30, what="the lease to reach the replica")

    killed = now_ms()
    sentinel_group.master.stop()
    wait_for(lambda: sentinel_group.master_port() != old_port, timeout=30, what="the sentinels to promote the replica")
    wait_for(lambda: "suspected Redis failover" in instance.log(), timeout=20, what="a leader on the new master")
    assert replica.hget(LEASE, "pid") in {str(p) for p in instance.worker_pids()}
    resumed = now_ms()
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > resumed]) >= 2, timeout=15, what="ticks again")

    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500, outages=[(killed, resumed)])
    assert not verdict.duplicates, verdict.summary()
    assert not verdict.losses, verdict.summary()
    assert "Traceback" not in instance.log(), instance.log()[-3000:]


def test_a_url_without_a_service_is_one_clear_error() -> None:
    with pytest.raises(CronConfigurationError, match="service"):
        scheduler_clients("redis+sentinel://127.0.0.1:26379", op_timeout_ms=400, block_timeout_ms=0)
