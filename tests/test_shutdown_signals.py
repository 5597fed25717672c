"""A burst of signals while the shutdown path runs never wedges a worker.

Real ``dramatiq`` processes run tests/apps/signal_storm.py, which raises
SIGTERM again from inside the worker's own handler at the moments a
locking handler deadlocks (inside ``Event.set`` with its lock held, and
just before a Redis command is sent), while the test sends a storm of
SIGTERMs to the whole process group.  The lease is watched in Redis
through keyspace notifications: the watcher sleeps until Redis reports
the key deleted (a release) or expired (no release), so it takes no CPU
from the worker it watches.  What is asserted is the hand-over itself: the
lease is deleted by the worker, long before it would have expired, and the
worker exits.  How fast that happens is a figure for benchmarks: timed
from this process, it also counts the time Redis, this process and the
worker's other threads (its GIL) kept the worker waiting.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Candidate, Lease
from tests.support.instances import Instance, alive, wait_for
from tests.support.lease_events import lease_events, lease_gone
from tests.support.redis_server import RedisServer

LEASE = "{dramatiq-cron}:lease"
#: The list tests/apps/thread_signal.py's thread waits on.
DELIVER = "{signal-test}:deliver"
ROUNDS = 4


def _hand_over_rounds(
    env: dict[str, str],
    app: str,
    signal_worker: Callable[[Instance, int], object],
    instances: Callable[..., Instance],
    redis_server: RedisServer,
    *,
    rounds: int,
) -> None:
    """For each round: start ``app``, wait for its worker to lead, signal
    it (``signal_worker(instance, pid)``), and assert that the lease is
    deleted (a release, not its expiry) and that the worker process exits."""
    ttl_s = int(env["CRON_APP_TTL"]) / 1000
    client = redis_server.client()
    listener = lease_events(client)
    for round_ in range(rounds):
        instance = instances(env, app=app)
        worker = int(wait_for(lambda: client.hget(LEASE, "pid"), timeout=30, what="the worker to lead"))
        assert worker in instance.worker_pids()
        while listener.get_message(timeout=0) is not None:  # the acquisition's events
            pass
        first = time.monotonic()
        signal_worker(instance, worker)
        how = lease_gone(listener, timeout=ttl_s + 30) or "still held"
        print(f"round {round_}: lease {how} {(time.monotonic() - first) * 1000:.1f} ms after the first signal")
        assert how == "del", f"round {round_}: the lease was not released ({how})"
        proc = instance.proc
        assert proc is not None
        try:
            wait_for(lambda proc=proc: proc.poll() is not None, timeout=30, what="the worker to exit")
        finally:
            instance.close()  # SIGKILL by pid to whatever is left of the group
    listener.close()


def _storm(instance: Instance, worker: int) -> None:
    """SIGTERM to the worker, then twenty to its process group."""
    os.kill(worker, signal.SIGTERM)
    for _ in range(20):
        try:
            os.killpg(instance.pid, signal.SIGTERM)
        except ProcessLookupError:
            break


def test_signals_during_the_hand_over_still_release_at_once_and_exit(
    app_env: dict[str, str], instances: Callable[..., Instance], redis_server: RedisServer
) -> None:
    """Given a leading worker whose SIGTERM handler is interrupted by more
    SIGTERMs (nested on the main thread), and a storm of SIGTERMs to its
    process group, then every time the lease is deleted from Redis (a
    release, not its expiry), and the worker process exits.  (A 10 s
    lease: a worker starved for seconds on a loaded machine still releases
    it rather than see it expire.)"""
    env = {**app_env, "CRON_APP_TTL": "10000"}
    _hand_over_rounds(env, "tests.apps.signal_storm", _storm, instances, redis_server, rounds=ROUNDS)


def test_a_storm_that_outlasts_every_retry_still_releases_at_once(
    app_env: dict[str, str], instances: Callable[..., Instance], redis_server: RedisServer
) -> None:
    """Given a leading worker whose SIGTERM handler gets two more SIGTERMs
    before every command it sends (dramatiq exits at the second: before
    the release is on the wire, at every retry), and the storm to its
    group, then the lease is still released and the worker exits: signals
    that come during the release are held until it is answered, then
    delivered.  (It gave up after three tries and exited,
    and the lease expired a lease later.)"""
    env = {**app_env, "CRON_APP_TTL": "10000", "SIGNAL_STORM_BURST": "2"}
    _hand_over_rounds(env, "tests.apps.signal_storm", _storm, instances, redis_server, rounds=2)


def test_a_signal_to_another_thread_hands_over_at_once(
    app_env: dict[str, str], instances: Callable[..., Instance], redis_server: RedisServer
) -> None:
    """Given a leading worker whose SIGTERM goes to a thread other than
    the main one (the kernel's choice) while the main thread sleeps in
    dramatiq's worker loop (made an hour long by the app, ended by the
    handler), then every time the lease is released, not left to expire,
    and the worker exits: the main thread is woken at once.  (The handler
    ran when the sleep ended, up to a second later with dramatiq's sleep.)"""
    client = redis_server.client()

    def deliver(instance: Instance, worker: int) -> None:
        client.rpush(DELIVER, 1)

    env = {**app_env, "CRON_APP_TTL": "10000"}
    _hand_over_rounds(env, "tests.apps.thread_signal", deliver, instances, redis_server, rounds=3)


def test_a_stop_after_the_lease_lapsed_is_reported_once(
    app_env: dict[str, str], instances: Callable[..., Instance], redis_server: RedisServer
) -> None:
    """Given a leading worker held off the CPU (SIGSTOP, as a starved or
    paused process is) until its lease expired, when it is told to stop
    (SIGTERM, handled as it runs again), then the hand-over cannot release
    the lease, and the worker says so: one WARNING naming the epoch (it
    used to say nothing, as if it had handed over)."""
    client = redis_server.client()
    listener = lease_events(client)
    instance = instances(app_env)
    worker = int(wait_for(lambda: client.hget(LEASE, "pid"), timeout=60, what="the worker to lead"))
    epoch = client.hget(LEASE, "epoch")
    os.kill(worker, signal.SIGSTOP)
    try:
        assert lease_gone(listener, timeout=30) == "expired"
        os.kill(worker, signal.SIGTERM)  # pending until it runs again
    finally:
        os.kill(worker, signal.SIGCONT)
    wait_for(lambda: not alive(worker), timeout=60, what="the worker to exit")
    mentions = [line for line in instance.log().splitlines() if f"(epoch {epoch})" in line]
    warnings = [line for line in mentions if "[WARNING]" in line]
    assert len(warnings) == 1, "\n".join(mentions) or "nothing said about the lapsed lease"
    assert "not released" in warnings[0] or "no further ticks" in warnings[0], warnings[0]
    assert not any("Released cron leadership" in line for line in mentions), "\n".join(mentions)


def test_the_hand_over_always_finds_a_token_while_an_acquire_may_have_won(redis_server: RedisServer) -> None:
    """Given a candidate taking the lease, when a signal's hand-over reads
    the release between any two lines of the acquire (a handler runs
    between two bytecodes of whatever the main thread did, and the GIL
    passes between threads the same way), then from the moment the
    acquire may have won until it returns, the release names its token.
    (The attempt was cleared a few lines before the token was set: a
    hand-over there released nothing, and an exit left the lease to
    expire.)"""
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=2000)
    lease = Lease(
        client=client,
        blocking_client=blocking,
        keys=Keys("token-window"),
        ttl_ms=2000,
        clock=ServerClock(),
        candidate=Candidate("t", 1),
    )
    seen: list[tuple[int, object]] = []
    code = Lease.acquire.__code__

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is code and event == "line":
            seen.append((frame.f_lineno, lease.hand_over_commands()[0][7]))
        return trace if frame.f_code is code else None

    sys.settrace(trace)
    try:
        acquired = lease.acquire()
    finally:
        sys.settrace(None)
    assert isinstance(acquired, Acquired)
    sent = next(i for i, (_, token) in enumerate(seen) if token != "-")
    nameless = [line for line, token in seen[sent:] if token == "-"]
    assert not nameless, f"the hand-over would release no token at line(s) {nameless} of Lease.acquire"
