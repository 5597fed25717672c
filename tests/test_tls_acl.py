"""TLS and ACL: the scheduler's own connections keep the ``rediss://``
transport, the CA to trust and the ACL user of the URL it is given, and its
logs never show the password, even when Redis goes away and comes back."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from dramatiq_cron_middleware.store.connection import scheduler_clients
from tests.support.components import require_binary, require_redis_feature
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_topologies import TlsRedis

SCHEDULE = "tick_0"
PASSWORD = "s3cret-Pa55word-never-logged"


@pytest.fixture
def tls_redis() -> Iterator[TlsRedis]:
    """A TLS-only redis-server whose only user is ``cron``/PASSWORD."""
    require_binary("openssl", install="apt-get install openssl")
    require_redis_feature("tls-port", feature="TLS")
    server = TlsRedis(username="cron", password=PASSWORD).start()
    yield server
    server.close()


def test_scheduler_clients_keep_tls_ca_and_acl_user_of_the_url(tls_redis: TlsRedis) -> None:
    client, blocking = scheduler_clients(tls_redis.url(), op_timeout_ms=500, block_timeout_ms=1000)
    for each in (client, blocking):
        assert "SSL" in type(each.connection_pool.get_connection()).__name__
        assert each.acl_whoami() == "cron"
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == tls_redis.certs["ca"]
    assert kwargs["socket_timeout"] == 0.5  # the scheduler's own short timeout, not the URL's


def test_over_tls_with_an_acl_user_ticks_fire_once_and_the_password_is_never_logged(
    tls_redis: TlsRedis, instances: Callable[..., Instance], history: History, record_dir: str
) -> None:
    env = {"DRAMATIQ_CRON_REDIS_URL": tls_redis.url(), "CRON_APP_RECORD": record_dir, "CRON_APP_TTL": "2000"}
    # --verbose: debug logging too must not leak the password.
    instance = instances(env, processes=2, extra=["--verbose"])
    start = history.first_tick(SCHEDULE)
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > start]) >= 2, timeout=60, what="two ticks")
    assert tls_redis.client().hget("{dramatiq-cron}:lease", "pid") in {str(p) for p in instance.worker_pids()}

    # Make the scheduler log its connection errors, then recover.  Redis
    # stays down until the scheduler has said so: a restart quicker than
    # the leader's next command is survived without a word (redis-py
    # retries on a new connection), so it would test nothing.
    tls_redis.server.stop()
    wait_for(lambda: "cannot reach Redis" in instance.log(), timeout=60, what="the scheduler to say Redis is gone")
    tls_redis.start()
    back = now_ms()
    wait_for(lambda: "reaches Redis again" in instance.log(), timeout=60, what="the scheduler to reconnect")
    # The restarted Redis holds none of the scheduler's data, so its
    # schedule starts again at the new leadership's first turn (delayed
    # after a suspected failover): nothing before that tick is owed, and
    # nothing after it may be missing.
    resumed = wait_for(
        lambda: [t for t in history.ticks(SCHEDULE) if t > back][:1], timeout=60, what="a tick after the restart"
    )[0]
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > resumed]) >= 2, timeout=60, what="ticks again")

    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500, outages=[(start, resumed)])
    assert not verdict.duplicates, verdict.summary()
    assert not [t for s, t in verdict.losses if t > resumed], verdict.summary()
    log = instance.log()
    assert "cannot reach Redis" in log
    assert PASSWORD not in log
    assert "Traceback" not in log, log[-3000:]
