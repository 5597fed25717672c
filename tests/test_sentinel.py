"""Redis Sentinel: a real master, a replica and three sentinels on
loopback.  The scheduler follows the master through a failover, and the
first leader after it waits one lease before firing."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest
from redis.sentinel import Sentinel

from dramatiq_cron_middleware import CronConfigurationError
from dramatiq_cron_middleware.store.codes import load_script
from dramatiq_cron_middleware.store.connection import describe, scheduler_clients, sentinels_of
from dramatiq_cron_middleware.store.durability import Durability, SentinelQuorum
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_topologies import SentinelGroup

SCHEDULE = "tick_0"
LEASE = "{dramatiq-cron}:lease"


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
    start = history.first_tick(SCHEDULE)
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > start]) >= 2, timeout=60, what="two ticks")
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
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > resumed]) >= 2, timeout=60, what="ticks again")

    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500, outages=[(killed, resumed)])
    assert not verdict.duplicates, verdict.summary()
    assert not verdict.losses, verdict.summary()
    assert "Traceback" not in instance.log(), instance.log()[-3000:]


def test_a_url_without_a_service_is_one_clear_error() -> None:
    with pytest.raises(CronConfigurationError, match="service"):
        scheduler_clients("redis+sentinel://127.0.0.1:26379", op_timeout_ms=400, block_timeout_ms=0)


def test_real_sentinels_confirm_the_master_and_refuse_a_replicas_address(sentinel_group: SentinelGroup) -> None:
    """The quorum reads real ``SENTINEL MASTER`` replies: the master's
    address is named by all three, a replica's by none; a durable write on
    the scheduler's client names the master it ran on."""
    client, blocking = scheduler_clients(sentinel_group.url(), op_timeout_ms=1000, block_timeout_ms=0)
    found = sentinels_of(client, timeout_ms=500)
    assert found is not None
    sentinels, service = found
    assert service == sentinel_group.service and len(sentinels) == 3
    quorum = SentinelQuorum(sentinels, service=service)
    master = ("127.0.0.1", sentinel_group.master_port())
    assert quorum.confirm(master) == ""
    assert "0 of the 2 sentinel(s) needed" in quorum.confirm(("127.0.0.1", sentinel_group.replica.port))
    durability = Durability(replicas=1, wait_ms=1000, sentinels=quorum)
    script = load_script(client, "release")
    _, ack = durability.run(
        client, script, ["{t}:lease", "{t}:wake", "{t}:candidates", "{t}:info"], ["-", "m", 1000, 1000]
    )
    assert ack.master == master and ack.replicas >= 1
    durability.check(ack)
    for c in (client, blocking, *sentinels):
        c.close()


class _StalledSentinel:
    """A listener that accepts connections and never answers (a sentinel
    that is partitioned away or stalled), counting the connections."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


def test_a_stalled_sentinel_is_asked_once_per_discovery_not_retried_with_backoff(sentinel_group: SentinelGroup) -> None:
    """Given a sentinel URL whose first sentinel never answers: finding the
    master asks it once (redis-py's default retries a sentinel ten times
    with back-off, about 8 s at a 300 ms timeout, on every reconnection of
    every pool) and goes on to the next."""
    stalled = _StalledSentinel()
    hosts = ",".join([f"127.0.0.1:{stalled.port}", *(f"{h}:{p}" for h, p in sentinel_group.addresses)])
    url = f"redis+sentinel://{hosts}/{sentinel_group.service}/0"
    try:
        client, blocking = scheduler_clients(url, op_timeout_ms=300, block_timeout_ms=0)
        assert client.execute_command("ROLE")[0] == "master"
        assert len(stalled.accepted) == 1, len(stalled.accepted)
        client.close()
        blocking.close()
    finally:
        stalled.close()
