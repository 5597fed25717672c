"""Removal is final for ticks owed to a broker that was down: a granted
tick whose enqueue failed is dropped, and recorded, once its runtime
definition is removed, instead of running after ``remove()`` returned.

A real ``dramatiq`` instance whose RedisBroker lives on a second
redis-server; the scheduler's own Redis stays up.  The broker's server is
stopped while ticks are granted and while ``remove()`` runs, then started
again: the removed schedule never runs after the removal returned, and the
declared schedule (owed alike) runs again."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

SID = "tick_0:r1"
KEYS = Keys("dramatiq-cron")


@pytest.fixture
def broker_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def tick_ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def runs(record_dir: str) -> list[dict[str, Any]]:
    out = []
    for path in glob.glob(os.path.join(record_dir, "runs-*.jsonl")):
        for line in Path(path).read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut short
                continue
    return out


def test_owed_ticks_of_a_removed_schedule_never_run_after_the_removal(
    app_env: dict[str, str],
    instances: Any,
    record_dir: str,
    redis_server: RedisServer,
    broker_server: RedisServer,
) -> None:
    instances({**app_env, "CRON_APP_BROKER": broker_server.url})
    scheduler = redis_server.client()
    store = RuntimeSchedules(
        redis.Redis.from_url(redis_server.url, decode_responses=True),
        KEYS,
        resolve_actor=lambda actor: ActorInfo("tick_0", "default"),
    )
    store.add("tick_0", "* * * * * *", name="r1")
    wait_for(lambda: sum(r["schedule"] == SID for r in runs(record_dir)) >= 2, timeout=20, what="r1 to run")

    broker_server.stop()
    stopped_ms = int(time.time() * 1000)

    def granted_since_stop() -> int:
        return sum(
            1
            for _, e in scheduler.xrange(KEYS.history)
            if e["schedule"] == SID and e["outcome"] in ("fired", "caught_up") and int(e["tick"]) > stopped_ms
        )

    # Ticks are granted (the ledger is up) and owed (the broker is not).
    wait_for(lambda: granted_since_stop() >= 2, timeout=60, what="ticks granted while the broker is down")
    assert store.remove("tick_0", "r1")
    removed_at = time.time()
    broker_server.start()

    # The broker works again: every declared tick owed alike (granted in
    # the same batches, retried on the same back-off) runs ...
    removed_ms = int(removed_at * 1000)
    owed = {
        int(e["tick"])
        for _, e in scheduler.xrange(KEYS.history)
        if e["schedule"] == "tick_0"
        and e["outcome"] in ("fired", "caught_up")
        and stopped_ms < int(e["tick"]) < removed_ms
    }
    assert owed

    def declared_ran() -> set[int]:
        return {tick_ms(r["tick"]) for r in runs(record_dir) if r["schedule"] == "tick_0"}

    wait_for(lambda: owed <= declared_ran(), timeout=30, what="the declared schedule's owed ticks to run")
    # ... and the removed one never did, its owed ticks dropped and recorded.
    late = [r for r in runs(record_dir) if r["schedule"] == SID and r["at"] > removed_at]
    assert late == [], f"{len(late)} runs of the removed schedule after remove() returned: {late[:3]}"
    dropped = [e for _, e in scheduler.xrange(KEYS.history) if e["schedule"] == SID and e["outcome"] == "dropped"]
    assert len(dropped) >= 2 and all(int(e["tick"]) > stopped_ms for e in dropped)
