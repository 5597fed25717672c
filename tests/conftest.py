"""Fixtures: a real redis-server per test, and real dramatiq instances."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

from tests.support.instances import History, Instance
from tests.support.redis_server import RedisServer
from tests.support.redis_topologies import ClusterGroup

# CI replays the same examples every run (a red build must be reproducible);
# locally hypothesis explores new ones, and anything it finds is kept in its
# example database.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server on a free loopback port, persistence off."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def cluster() -> Iterator[ClusterGroup]:
    """Three cluster masters joined by ``redis-cli --cluster create``."""
    group = ClusterGroup()
    try:
        yield group.start()
    finally:
        group.close()


@pytest.fixture
def record_dir(tmp_path: Any) -> str:
    """Where the test app records enqueues and runs."""
    path = tmp_path / "record"
    path.mkdir()
    return str(path)


@pytest.fixture
def history(record_dir: str) -> History:
    """The recorded history of the test app."""
    return History(record_dir)


@pytest.fixture
def app_env(redis_server: RedisServer, record_dir: str) -> dict[str, str]:
    """Environment for tests/apps/cronapp.py against ``redis_server``."""
    return {
        "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
        "CRON_APP_RECORD": record_dir,
        "CRON_APP_TTL": "2000",
    }


@pytest.fixture
def instances() -> Iterator[Callable[..., Instance]]:
    """Start dramatiq instances; every one is stopped at teardown."""
    started: list[Instance] = []

    def start(env: dict[str, str], **kwargs: Any) -> Instance:
        instance = Instance(env, name=f"i{len(started)}", **kwargs)
        started.append(instance)
        return instance.start()

    yield start
    for instance in started:
        instance.close()
    if os.environ.get("CRON_KEEP_LOGS") != "1":
        for instance in started:
            try:
                os.unlink(instance.log_path)
            except OSError:
                pass
