"""A master demoted while the scheduler is connected to it: a failover that
keeps the old master alive (``SENTINEL FAILOVER``, a failover the
sentinels abort, which turns the promoted replica back into a replica, or
a managed Redis behind a DNS name) leaves the scheduler's open connections
on a replica.  A write the replica refuses must drop the connection that
got the refusal, so that the next command connects again: on Sentinel to
the master the sentinels name now, elsewhere to what the address means
now.  Redis 6 wraps a script's ``READONLY`` in a script error that
redis-py does not take for one, and the connection stayed on the replica
for ever: the leader then logged READONLY every turn and fired nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.durability import Durability
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer, free_port
from tests.support.redis_topologies import RedisProcess, SentinelGroup

#: A write inside a script: the form Redis 6 wraps in a script error.
SET_IN_SCRIPT = "return redis.call('SET', KEYS[1], ARGV[1])"


def writes(client: redis.Redis) -> dict[str, Any]:
    """A plain write, a write inside a script (EVAL and EVALSHA), and the
    durable claim's script-and-WAIT in one round trip, by name."""
    return {
        "SET": lambda: client.set("{t}:k", "v"),
        "EVAL": lambda: client.eval(SET_IN_SCRIPT, 1, "{t}:k", "v"),
        "EVALSHA": lambda: client.register_script(SET_IN_SCRIPT)(keys=["{t}:k"], args=["v"]),
        "EVALSHA+WAIT": lambda: Durability(replicas=1, wait_ms=10).run(
            client, client.register_script(SET_IN_SCRIPT), ["{t}:k"], ["v"]
        ),
    }


@pytest.fixture(params=["plain", "sentinel"])
def source(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[str]:
    """The URL of ``redis_server``, plainly or as the master of a service
    that one sentinel watches (never judging it down in this test)."""
    if request.param == "plain":
        yield redis_server.url
        return
    sentinel = RedisProcess(
        [f"sentinel monitor svc 127.0.0.1 {redis_server.port} 1", "sentinel down-after-milliseconds svc 600000"],
        sentinel=True,
    ).start()
    try:
        sentinel.wait_ready(lambda: sentinel.client().sentinel_get_master_addr_by_name("svc"))
        yield f"redis+sentinel://127.0.0.1:{sentinel.port}/svc/0"
    finally:
        sentinel.close()


def test_a_write_a_replica_refuses_drops_the_connection_so_the_next_command_connects_again(
    redis_server: RedisServer, source: str
) -> None:
    client, blocking = scheduler_clients(source, op_timeout_ms=1000, block_timeout_ms=0)
    admin = redis_server.client()
    # A plain client tells the refusal (the leader then suspects a
    # failover); on Sentinel, as redis-py does, it asks the sentinels again.
    refusal: Any = redis.ReadOnlyError if source == redis_server.url else (redis.ReadOnlyError, redis.ConnectionError)
    for name, write in writes(client).items():
        write()
        before = client.client_id()
        # Demoted under the open connection, behind the sentinel's back
        # (which names it still, as a sentinel that has not heard yet does).
        admin.replicaof("127.0.0.1", free_port())
        try:
            with pytest.raises(refusal, match=r"(?i)read.only|replica|slave"):
                write()
            assert client.client_id() != before, f"{name}: the refused command's connection was kept"
        finally:
            admin.replicaof("NO", "ONE")
    client.close()
    blocking.close()


def test_a_master_demoted_by_a_failover_is_left_for_the_new_master(sentinel_group: SentinelGroup) -> None:
    group = sentinel_group
    client, blocking = scheduler_clients(group.url(), op_timeout_ms=1000, block_timeout_ms=0)
    write = writes(client)["EVALSHA"]  # the leader's form
    write()  # a connection open on the master
    old = group.master_port()

    def failover() -> bool:
        try:
            return bool(group.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", group.service))
        except redis.ResponseError as exc:  # NOGOODSLAVE until the sentinel has had the replicas' INFO
            assert "NOGOODSLAVE" in str(exc), exc
            return False

    wait_for(failover, timeout=60, interval=0.5, what="the sentinel to accept a failover")

    def moved() -> bool:
        named = {s.client().sentinel_get_master_addr_by_name(group.service) for s in group.sentinels}
        return len(named) == 1 and int(next(iter(named))[1]) != old

    wait_for(moved, timeout=60, what="every sentinel to name the new master")
    demoted = redis.Redis(host="127.0.0.1", port=old, socket_timeout=5)
    wait_for(lambda: demoted.role()[0] == b"slave", timeout=60, what="the old master to be demoted")
    demoted.close()
    # The first write meets the moved master (MasterChanged) or the
    # replica (and reconnects); the one after it runs on the new master.
    refused: list[str] = []

    def written() -> bool:
        try:
            write()
        except redis.RedisError as exc:
            refused.append(f"{type(exc).__name__}: {exc}")
            return False
        return True

    wait_for(written, timeout=60, what=f"a write on the new master; refused: {refused[-3:]}")
    assert len(refused) <= 1, refused
    assert int(client.config_get("port")["port"]) == group.master_port() != old
    client.close()
    blocking.close()
