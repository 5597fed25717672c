"""The scheduler's Redis connections on redis-py 8: RESP2 and RESP3 alike,
and no maintenance notification relaxes their timeouts.

redis-py 8 speaks RESP3 by default, and a RESP3 pool follows the server's
maintenance notifications: a managed Redis announcing a migration or a
failover makes it raise every connection's socket timeout to 10 s, far
longer than a lease.  The relaxation is simulated here as redis-py performs
it, by handing the connection's handlers the notification a server pushes.
(The scripts' replies on both protocols: tests/store/test_contract.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from dramatiq_cron_middleware.store.connection import scheduler_clients
from tests.support.redis_server import RedisServer

maint = pytest.importorskip("redis.maint_notifications", reason="redis-py before 7 relaxes no timeouts")

OP_TIMEOUT_MS = 1500


def relax(client: redis.Redis) -> Any:
    """What redis-py does when the server announces maintenance (a
    ``MIGRATING`` push): every handler the connection registered is given
    the notification.  Returns the connection, as it is afterwards."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        connection.connect()
        for name in ("_maint_notifications_connection_handler", "_maint_notifications_pool_handler"):
            handler = getattr(connection, name, None)
            if handler is not None:
                handler.handle_notification(maint.NodeMigratingNotification(id=1, ttl=30))
        return connection
    finally:
        pool.release(connection)


def socket_timeout(connection: Any) -> float | None:
    sock = connection._sock
    assert sock is not None
    timeout: float | None = sock.gettimeout()
    return timeout


@pytest.mark.parametrize("query", ["", "?protocol=3", "?protocol=2"], ids=["default", "resp3", "resp2"])
def test_the_schedulers_connections_keep_their_timeouts_when_redis_py_would_relax_them(
    redis_server: RedisServer, query: str
) -> None:
    url = redis_server.url + query
    # The simulation relaxes a plain redis-py client speaking RESP3...
    plain = redis.Redis.from_url(url, socket_timeout=OP_TIMEOUT_MS / 1000)
    try:
        plain.ping()
        expected = 10 if plain.connection_pool.maint_notifications_enabled() else OP_TIMEOUT_MS / 1000
        assert socket_timeout(relax(plain)) == expected
    finally:
        plain.close()
    # ...and leaves the scheduler's two clients as they were built.
    commands, blocking = scheduler_clients(url, op_timeout_ms=OP_TIMEOUT_MS, block_timeout_ms=2000)
    try:
        for client, timeout in ((commands, OP_TIMEOUT_MS / 1000), (blocking, (OP_TIMEOUT_MS + 2000) / 1000)):
            assert client.ping()
            connection = relax(client)
            assert socket_timeout(connection) == timeout
            assert connection.socket_timeout == timeout
            assert connection.retry.get_retries() == 1
            assert not client.connection_pool.maint_notifications_enabled()
        if query:
            info = commands.client_info()
            if "resp" in info:  # Redis 7 and later report a connection's protocol
                assert info["resp"] == query[-1]  # the protocol the URL asked for
    finally:
        commands.close()
        blocking.close()


def test_a_sentinel_managed_scheduler_client_follows_no_maintenance_notification() -> None:
    """Built without connecting (no sentinel listens there): the master's
    pool and the sentinels' own clients opt out as the plain ones do."""
    commands, blocking = scheduler_clients(
        "redis+sentinel://127.0.0.1:1/mymaster", op_timeout_ms=OP_TIMEOUT_MS, block_timeout_ms=2000
    )
    for client in (commands, blocking):
        pool: Any = client.connection_pool
        assert not pool.maint_notifications_enabled()
        for sentinel in pool.sentinel_manager.sentinels:
            assert not sentinel.connection_pool.maint_notifications_enabled()
