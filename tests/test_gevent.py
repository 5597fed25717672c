"""Under ``dramatiq-gevent`` (threads are greenlets, sockets and
``Event.wait`` cooperative, ``signal`` patched) the scheduler keeps its
guarantees: one leader fires each tick once, the follower's blocking wait
does not starve the hub, and SIGTERM reaches the chained handler so the
lease is released at once."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.components import require_module
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.lease_events import lease_events, lease_gone
from tests.support.redis_server import RedisServer

SCHEDULE = "tick_0"
LEASE = "{dramatiq-cron}:lease"
DRAMATIQ_GEVENT = str(Path(sys.executable).parent / "dramatiq-gevent")


def _leader_pid(server: RedisServer) -> int | None:
    pid = server.client().hget(LEASE, "pid")
    return int(pid) if pid else None


def test_under_gevent_each_tick_fires_once_and_sigterm_hands_over_at_once(
    app_env: dict[str, str], instances: Callable[..., Instance], history: History, redis_server: RedisServer
) -> None:
    require_module("gevent", install="pip install gevent")
    # Two greenlet-based instances compete; --threads 4 means four worker
    # greenlets beside the leader greenlet in each.
    group = [
        instances(app_env, command=[DRAMATIQ_GEVENT, "tests.apps.cronapp", "--processes", "1", "--threads", "4"])
        for _ in range(2)
    ]
    first = wait_for(lambda: _leader_pid(redis_server), timeout=30, what="a leader")
    start = now_ms()
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > start]) >= 3, timeout=30, what="three ticks")

    listener = lease_events(redis_server.client())
    # The leader now: on a loaded machine the lease may have changed hands
    # since the first ticks (legitimately), and only the leader releases.
    first = _leader_pid(redis_server)
    victim = next(i for i in group if first in i.worker_pids())
    victim.signal(signal.SIGTERM)
    # Redis reports the key deleted, not expired: the release handed over.
    assert lease_gone(listener, timeout=30) == "del", "the lease was not released"
    listener.close()
    wait_for(
        lambda: (p := _leader_pid(redis_server)) and p != first, timeout=30, interval=0.005, what="the follower to lead"
    )
    assert victim.proc is not None and victim.proc.wait(30) == 0
    assert "Released cron leadership" in victim.log()

    resumed = now_ms()
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > resumed]) >= 2, timeout=30, what="two more ticks")
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert verdict.expected >= 4
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    for instance in group:
        assert "Traceback" not in instance.log(), instance.log()[-3000:]
