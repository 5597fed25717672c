"""``dramatiq-cron migrate``: what is left of the scheduler migrated from
(issue 30, docs/migration.md).  dramatiq-crontab's lock (a redis-py
``Lock`` on the key ``dramatiq-scheduler``) is shown with its holder and
PTTL, watched for a renewal, and deleted only when asked and nobody renews
it (or with --force); periodiq keeps no lock.  The real command against a
real redis-server that requires a password, which it never prints; the
service's rule also on the memory store and a fake clock."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import threading
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.store.memory.operator import MemoryOperator
from dramatiq_cron_middleware.testing import CronSimulator
from tests.support.command import dramatiq_cron
from tests.support.redis_server import RedisServer, password_protected

KEY = "dramatiq-scheduler"
PASSWORD = "s3cr3t-pw"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with password_protected(PASSWORD) as redis_server:
        yield redis_server


def migrate(server: RedisServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"DRAMATIQ_CRON_REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0", "CRON_APP_BROKER": "stub"}
    result = dramatiq_cron(env, "migrate", "tests.apps.cronapp", *args)
    assert PASSWORD not in result.stdout + result.stderr, result
    return result


def test_no_lock_is_nothing_to_clear(server: RedisServer) -> None:
    server.client(password=PASSWORD).delete(KEY)
    result = migrate(server, "crontab")
    assert result.returncode == 0, result
    assert "dramatiq-crontab's lock 'dramatiq-scheduler' on redis://127.0.0.1:" in result.stdout
    assert result.stdout.rstrip().endswith(": gone, nothing to clear."), result


def test_a_leftover_is_shown_and_deleted_only_when_asked(server: RedisServer) -> None:
    # Given the lock of a stopped crontab process (its TTL counting down),
    # When migrate watches it, Then it says who held it and that nobody
    # renews it, and leaves it; with --delete it deletes it.
    client = server.client(password=PASSWORD)
    client.set(KEY, "4f1c0ffee", px=60_000)
    shown = migrate(server, "crontab", "--watch", "300")
    assert shown.returncode == 0, shown
    assert "held by token '4f1c0ffee', expires in " in shown.stdout, shown
    assert "not renewed in 300 ms: a leftover that expires by itself (or --delete it now)." in shown.stdout, shown
    assert client.get(KEY) == "4f1c0ffee"
    deleted = migrate(server, "crontab", "--watch", "300", "--delete", "--json")
    assert deleted.returncode == 0, deleted
    data = json.loads(deleted.stdout)
    assert (data["key"], data["holder"], data["renewed"], data["deleted"]) == (KEY, "4f1c0ffee", False, True)
    assert PASSWORD not in data["where"] and client.exists(KEY) == 0


def test_a_lock_a_live_crontab_renews_is_not_deleted_unless_forced(server: RedisServer) -> None:
    # Given dramatiq-crontab's lock held and extended by a live scheduler
    # (here every 100 ms, as redis-py's Lock does it), When migrate is
    # asked to delete it, Then it refuses with exit 1 saying a crontab
    # process still runs; with --force it deletes it.
    client = server.client(password=PASSWORD)
    lock = client.lock(KEY, timeout=10, thread_local=False)
    assert lock.acquire(blocking=False)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.1):
            try:
                lock.extend(10, replace_ttl=True)
            except Exception:  # deleted by --force: nothing left to renew
                return

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        refused = migrate(server, "crontab", "--watch", "3000", "--delete")
        assert refused.returncode == 1, refused
        assert "renewed within 3000 ms: a `manage.py crontab` process still runs; stop it first." in refused.stdout
        assert client.exists(KEY) == 1
        forced = migrate(server, "crontab", "--watch", "3000", "--delete", "--force", "--json")
        assert forced.returncode == 0, forced
        data = json.loads(forced.stdout)
        assert (data["renewed"], data["deleted"]) == (True, True), data
    finally:
        stop.set()
        renewer.join()


def test_a_lock_without_expiry_is_deleted_only_with_force(server: RedisServer) -> None:
    # An older dramatiq-crontab took the lock with no timeout: no renewal
    # can be watched, so only --force deletes it.
    client = server.client(password=PASSWORD)
    client.set(KEY, "old-token")
    refused = migrate(server, "crontab", "--delete")
    assert refused.returncode == 1, refused
    assert "held by token 'old-token', no expiry; not watched for a renewal" in refused.stdout, refused
    assert client.exists(KEY) == 1
    assert migrate(server, "crontab", "--delete", "--force").returncode == 0
    assert client.exists(KEY) == 0


def test_periodiq_keeps_no_lock(server: RedisServer) -> None:
    result = migrate(server, "periodiq")
    assert (result.returncode, result.stdout.strip()) == (
        0,
        "periodiq keeps no lock in Redis: nothing to clear. Stop its `periodiq` process.",
    ), result


@pytest.fixture
def simulated() -> Iterator[tuple[CronMiddleware, CronSimulator]]:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware())
    dramatiq.set_broker(broker)

    @dramatiq.actor
    def report() -> None: ...

    simulator = CronSimulator(broker, now=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
    try:
        yield CronMiddleware.of(broker), simulator
    finally:
        simulator.close()
        broker.close()


def test_the_rule_on_the_memory_store(simulated: tuple[CronMiddleware, CronSimulator]) -> None:
    # The service decides from two reads of the lock a watch apart, on the
    # store's clock: counted down is a leftover, pushed back is renewed.
    cron, simulator = simulated
    service = cron.service
    store = service.store
    assert isinstance(store, MemoryOperator)

    def now() -> int:
        return store.server_ms()

    def elapse(seconds: float) -> None:
        simulator.advance(by=dt.timedelta(seconds=seconds))

    def elapse_renewed(seconds: float) -> None:
        elapse(seconds)
        store.foreign[KEY] = ("live", now() + 10_000)

    store.foreign[KEY] = ("left", now() + 10_000)
    left = service.crontab_lock(watch_ms=6_000, wait=elapse)
    assert (left.holder, left.pttl_ms, left.renewed, left.deleted) == ("left", 4_000, False, False)
    assert service.crontab_lock(delete=True, watch_ms=1_000, wait=elapse).deleted
    assert service.crontab_lock(wait=elapse).holder is None

    store.foreign[KEY] = ("live", now() + 10_000)
    live = service.crontab_lock(delete=True, watch_ms=6_000, wait=elapse_renewed)
    assert (live.renewed, live.deleted, KEY in store.foreign) == (True, False, True)
    assert service.crontab_lock(delete=True, force=True, wait=elapse_renewed).deleted
