"""Every Redis client a middleware makes comes from one place
(``store.connection.Connections``): each kind is built once, with the
timeouts of its kind, and the stop closes them all but the worker threads',
which go once the worker has drained."""

from __future__ import annotations

import redis

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.store.connection import Connections
from dramatiq_cron_middleware.store.timing import Timing
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def _named(server: RedisServer) -> set[str]:
    """The names of the clients connected to ``server`` now."""
    return {c["name"] for c in server.client().client_list() if c.get("name")}


def test_each_kind_of_client_is_built_once_with_its_own_timeout(redis_server: RedisServer) -> None:
    timing = Timing.for_lease(3000)
    connections = Connections(redis_server.url, timing=timing)
    command, blocking = connections.scheduler()
    assert connections.scheduler() == (command, blocking)
    assert connections.operator() is connections.operator()
    assert connections.for_workers(700) is connections.for_workers(700)
    assert connections.for_workers(700) is not connections.for_workers(900)
    assert command.connection_pool.connection_kwargs["socket_timeout"] == timing.op_timeout_ms / 1000
    blocking_ms = timing.op_timeout_ms + timing.block_timeout_ms
    assert blocking.connection_pool.connection_kwargs["socket_timeout"] == blocking_ms / 1000
    operator_ms = Timing.OPERATOR_TIMEOUT_MS
    assert connections.operator().connection_pool.connection_kwargs["socket_timeout"] == operator_ms / 1000
    # The worker threads' pool with ``threads`` waits for a free connection.
    shared = connections.for_workers(700, threads=16)
    assert isinstance(shared.connection_pool, redis.BlockingConnectionPool)
    assert shared.connection_pool.max_connections == 16
    assert connections.sentinels() is None  # a plain Redis


def test_close_ends_every_connection_but_the_worker_threads_and_close_workers_those(
    redis_server: RedisServer,
) -> None:
    # Given one connection of each kind open, each named on the server
    connections = Connections(redis_server.url, timing=Timing.for_lease(3000))
    command, blocking = connections.scheduler()
    kinds = {"command": command, "blocking": blocking, "operator": connections.operator()}
    worker = connections.for_workers(700)
    for name, client in {**kinds, "worker": worker}.items():
        client.client_setname(name)
    shutdown = connections.shutdown("any-key")
    assert shutdown is not None
    shutdown.send_command("CLIENT", "SETNAME", "shutdown")
    assert shutdown.read_response() == "OK"
    wait_for(lambda: _named(redis_server) >= {*kinds, "worker", "shutdown"}, timeout=30, what="all connected")
    # When the connections are closed, then all are gone but the worker
    # threads' (the hand-over's own connection is closed by its HandOver)
    connections.close()
    wait_for(lambda: not (_named(redis_server) & set(kinds)), timeout=30, what="closed")
    assert "worker" in _named(redis_server)
    # And the worker threads' go at close_workers; a client used again reconnects
    connections.close_workers()
    wait_for(lambda: "worker" not in _named(redis_server), timeout=30, what="workers closed")
    assert command.ping() and worker.ping()
    shutdown.disconnect()


def test_the_middleware_builds_its_connections_once_from_its_source(redis_server: RedisServer) -> None:
    from dramatiq.brokers.stub import StubBroker

    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=3000)
    broker = StubBroker()
    connections = middleware.connections(broker)
    assert middleware.connections(broker) is connections
    assert connections.source == redis_server.url
    assert connections.timing == middleware.timing
