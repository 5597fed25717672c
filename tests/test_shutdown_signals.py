"""A burst of signals while the shutdown path runs never wedges a worker.

Real ``dramatiq`` processes run tests/apps/signal_storm.py, which raises
SIGTERM again from inside the worker's own handler at the moments a
locking handler deadlocks (inside ``Event.set`` with its lock held, and
just before a Redis command is sent), while the test sends a storm of
SIGTERMs to the whole process group.  The lease is watched in Redis.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from tests.support.instances import Instance, wait_for
from tests.support.redis_server import RedisServer

LEASE = "{dramatiq-cron}:lease"
ROUNDS = 4


def test_signals_during_the_hand_over_still_release_at_once_and_exit(
    app_env: dict[str, str], instances: Callable[..., Instance], redis_server: RedisServer
) -> None:
    """Given a leading worker whose SIGTERM handler is interrupted by more
    SIGTERMs (nested on the main thread), and a storm of SIGTERMs to its
    process group, then every time the lease is gone from Redis within
    100 ms of the first signal and the worker process exits."""
    client = redis_server.client()
    for round_ in range(ROUNDS):
        instance = instances(app_env, app="tests.apps.signal_storm")
        pid = wait_for(lambda: client.hget(LEASE, "pid"), timeout=15, what="the worker to lead")
        worker = int(pid)
        assert worker in instance.worker_pids()
        first = time.monotonic()
        os.kill(worker, signal.SIGTERM)
        for _ in range(20):
            try:
                os.killpg(instance.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
        while client.exists(LEASE) and time.monotonic() - first < 5:
            pass
        released = time.monotonic() - first
        print(f"round {round_}: lease gone {released * 1000:.1f} ms after the first signal")
        assert released < 0.1, f"round {round_}: the lease was still held {released * 1000:.0f} ms after SIGTERM"
        proc = instance.proc
        assert proc is not None
        try:
            wait_for(lambda proc=proc: proc.poll() is not None, timeout=10, what="the worker to exit")
        finally:
            instance.close()  # SIGKILL by pid to whatever is left of the group
