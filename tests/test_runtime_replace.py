"""A replaced or re-added runtime schedule keeps what its write decided,
whoever leads next: the write owns the schedule's ledger entry and shape.

Two real ``dramatiq`` instances on a real redis-server.  The leader is
frozen, the schedule is written (by the store, in milliseconds, well before
the frozen lease expires), ticks pass, another instance takes over, and the
frozen leader is killed (-9): the next leader's takeover must fire every tick the
write owes (the gap of an unchanged schedule; every tick after the write of
a changed or re-added one), once, and none of a changed or removed
definition from before its write."""

from __future__ import annotations

import collections
import os
import signal
from typing import Any

import pytest
import redis

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.instances import History, now_ms, wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, cli_json

SID = "tick_0:r1"
LEASE = "{dramatiq-cron}:lease"


def _leader_instance(redis_server: RedisServer, group: list[Any]) -> tuple[int, Any]:
    pid = wait_for(lambda: int(redis_server.client().hget(LEASE, "pid") or 0), timeout=60, what="a leader")
    owner = [i for i in group if pid in i.worker_pids()]
    assert len(owner) == 1, f"leader {pid} is no worker of the instances"
    return pid, owner[0]


@pytest.mark.parametrize("write", ["same shape", "another shape", "re-added"])
def test_a_takeover_after_a_runtime_write_fires_what_the_write_owes(
    write: str, app_env: dict[str, str], instances: Any, history: History, redis_server: RedisServer
) -> None:
    env = {"DRAMATIQ_CRON_REDIS_URL": redis_server.url}
    group = [instances(app_env) for _ in range(2)]
    cli_json(env, "add", APP, "tick_0", "* * * * * *", "--name", "r1")
    wait_for(lambda: len(history.ticks(SID)) >= 2, timeout=60, what="the runtime schedule to fire")
    leader, owner = _leader_instance(redis_server, group)
    store = RuntimeSchedules(
        redis.Redis.from_url(redis_server.url, decode_responses=True),
        Keys("dramatiq-cron"),
        resolve_actor=lambda actor: ActorInfo("tick_0", "default"),
    )
    os.kill(leader, signal.SIGSTOP)
    frozen_ms = now_ms()
    try:
        start = now_ms()
        if write == "same shape":  # an edit of its arguments only
            store.add("tick_0", Schedule("* * * * * *", kwargs={"edited": 1}), name="r1")
        elif write == "another shape":  # another zone: same grid, so a tick falls in any second
            store.add("tick_0", Schedule("* * * * * *", timezone="Europe/Paris"), name="r1")
        else:
            assert store.remove("tick_0", "r1")
            store.add("tick_0", "* * * * * *", name="r1")
        written = now_ms()
        # Ticks fall due while the frozen leader still holds the lease (at
        # least a third of its 2 s: it renews every third), then another
        # instance takes over.
        wait_for(lambda: _leader_instance(redis_server, group)[0] != leader, timeout=60, what="a new leader")
    finally:
        owner.kill9()
    end = now_ms()
    wait_for(lambda: bool(history.ticks(SID)) and history.ticks(SID)[-1] > end + 1000, timeout=60, what="ticks")

    counts = collections.Counter(e.tick_ms for e in history.enqueues() if e.schedule == SID)
    assert [t for t, n in counts.items() if n > 1] == [], "a tick was enqueued twice"
    fired_before_freeze = max(t for t in counts if t <= frozen_ms)
    latest = max(counts)  # every tick up to the latest one enqueued is owed
    if write == "same shape":
        # The unchanged schedule catches up its whole gap, across the write.
        owed = range(fired_before_freeze + 1000, latest + 1, 1000)
    else:
        # Every tick after the write, none of the definition it replaced.
        owed = range((written // 1000 + 1) * 1000, latest + 1, 1000)
        stale = [t for t in counts if fired_before_freeze < t < start]
        assert stale == [], f"ticks from before the write fired: {stale}"
    assert len(owed) >= 2
    lost = [t for t in owed if t not in counts]
    assert lost == [], f"{write}: lost {len(lost)} of {len(owed)} owed ticks: {lost[:5]}"
    assert any(t > end for t in counts)
