"""The faults, one function each: inject, hold, undo, and return what was
done as a :class:`Fault`.  Each waits on conditions (a new leader, a booted
worker) rather than on luck; fixed pauses are only the fault's own length.

The scheduler-side Redis faults (stalls, restarts, proxy trouble) never
touch the broker Redis, so workers must keep running plain jobs through
them: those faults send one and wait for it while the fault holds.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable

import redis

from tests.support.instances import now_ms, wait_for

from .cluster import Cluster, Fault, pause

__all__ = ["FAULTS", "MIXABLE"]


def _hold(cluster: Cluster) -> float:
    """How long an outage-type fault lasts: well past the lease."""
    return 2.5 * cluster.ttl_ms / 1000


def lease_deleted(cluster: Cluster) -> Fault:
    """DEL the lease key three times while a leader runs."""
    fault = Fault("lease_deleted", now_ms())
    for _ in range(3):
        cluster.leader_instance()
        cluster.client.delete(cluster.keys.lease)
        pause(cluster.ttl_ms / 2000)
    return cluster.record(fault)


def lease_ttl_cut(cluster: Cluster) -> Fault:
    """PEXPIRE the lease to 50 ms three times while a leader runs."""
    fault = Fault("lease_ttl_cut", now_ms())
    for _ in range(3):
        cluster.leader_instance()
        cluster.client.pexpire(cluster.keys.lease, 50)
        pause(cluster.ttl_ms / 2000)
    return cluster.record(fault)


def flushall(cluster: Cluster) -> Fault:
    """FLUSHALL: the ledger is wiped on purpose (a declared outage)."""
    fault = Fault("flushall", now_ms(), wipes=True)
    cluster.client.flushall()
    return cluster.record(fault)


def flushdb(cluster: Cluster) -> Fault:
    """FLUSHDB: the ledger is wiped on purpose (a declared outage)."""
    fault = Fault("flushdb", now_ms(), wipes=True)
    cluster.client.flushdb()
    return cluster.record(fault)


def leader_sigstop(cluster: Cluster) -> Fault:
    """SIGSTOP the leader's worker process until another one has taken the
    lease, then SIGCONT it: it wakes believing it leads."""
    _, pid = cluster.leader_instance()
    fault = Fault("leader_sigstop", now_ms(), detail=f"pid {pid}")
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: cluster.leader_pid() not in (None, pid), timeout=30, interval=0.05, what="a new leader")
        pause(cluster.ttl_ms / 1000)
    finally:
        os.kill(pid, signal.SIGCONT)
    return cluster.record(fault)


def leader_kill9(cluster: Cluster) -> Fault:
    """kill -9 the leader's whole instance; restart it once another leads."""
    instance, pid = cluster.leader_instance()
    fault = Fault("leader_kill9", now_ms(), detail=f"pid {pid}")
    instance.kill9()
    wait_for(lambda: cluster.leader_pid() not in (None, pid), timeout=30, interval=0.05, what="a new leader")
    cluster.record(fault)
    cluster.replace(instance)
    return fault


def leader_sigterm(cluster: Cluster) -> Fault:
    """SIGTERM the leader's instance (graceful: the lease is released)."""
    instance, pid = cluster.leader_instance()
    fault = Fault("leader_sigterm", now_ms(), detail=f"pid {pid}")
    status = instance.terminate()
    assert status == 0, f"{instance.name} exited with {status} after SIGTERM"
    wait_for(lambda: cluster.leader_pid() not in (None, pid), timeout=30, interval=0.05, what="a new leader")
    cluster.record(fault)
    cluster.replace(instance)
    return fault


def leader_sighup(cluster: Cluster) -> Fault:
    """SIGHUP the leader's instance: dramatiq restarts its workers."""
    instance, pid = cluster.leader_instance()
    booted = instance.log().count("Worker process is ready for action")
    fault = Fault("leader_sighup", now_ms(), detail=f"pid {pid}")
    instance.signal(signal.SIGHUP)
    wait_for(
        lambda: instance.log().count("Worker process is ready for action") > booted,
        timeout=30,
        interval=0.05,
        what=f"{instance.name} to reload",
    )
    return cluster.record(fault)


def _stall(cluster: Cluster, kind: str, stall: Callable[[float], None]) -> Fault:
    """Hold a Redis stall past the lease while the workers run a job."""
    fault = Fault(kind, now_ms())
    seconds = _hold(cluster)
    stall(seconds)
    return cluster.record(fault)


def redis_debug_sleep(cluster: Cluster) -> Fault:
    """DEBUG SLEEP past the lease: Redis answers nobody meanwhile."""

    def stall(seconds: float) -> None:
        sleeper = redis.Redis(host="127.0.0.1", port=cluster.redis.port, socket_timeout=seconds + 10)
        thread = threading.Thread(target=sleeper.execute_command, args=("DEBUG", "SLEEP", seconds), daemon=True)
        thread.start()
        cluster.wait_job_processed()
        thread.join(seconds + 10)
        sleeper.close()

    return _stall(cluster, "redis_debug_sleep", stall)


def redis_client_pause(cluster: Cluster) -> Fault:
    """CLIENT PAUSE ALL past the lease."""

    def stall(seconds: float) -> None:
        cluster.client.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")
        cluster.wait_job_processed()
        pause(seconds)

    return _stall(cluster, "redis_client_pause", stall)


def redis_sigstop(cluster: Cluster) -> Fault:
    """SIGSTOP redis-server past the lease, then SIGCONT."""

    def stall(seconds: float) -> None:
        cluster.redis.pause()
        try:
            cluster.wait_job_processed()
            pause(seconds)
        finally:
            cluster.redis.resume()

    return _stall(cluster, "redis_sigstop", stall)


def redis_restart_persistent(cluster: Cluster) -> Fault:
    """Kill -9 and restart Redis; the append-only file keeps the ledger."""
    assert cluster.redis.persistence, "this fault needs a Redis with persistence"
    fault = Fault("redis_restart_persistent", now_ms())
    cluster.redis.stop()
    cluster.wait_job_processed()
    pause(cluster.ttl_ms / 1000)
    cluster.redis.start()
    return cluster.record(fault)


def redis_restart_empty(cluster: Cluster) -> Fault:
    """Kill -9 and restart Redis with its data gone: a declared outage."""
    fault = Fault("redis_restart_empty", now_ms(), wipes=True)
    cluster.redis.stop()
    shutil.rmtree(os.path.join(cluster.redis.dir, "appendonlydir"), ignore_errors=True)
    cluster.wait_job_processed()
    pause(cluster.ttl_ms / 1000)
    cluster.redis.start()
    return cluster.record(fault)


def proxy_latency(cluster: Cluster) -> Fault:
    """Add latency beyond the renew interval to every scheduler packet."""
    assert cluster.proxy is not None
    delay = int(cluster.ttl_ms / 3 + 200)
    fault = Fault("proxy_latency", now_ms(), detail=f"{delay} ms each way")
    cluster.proxy.set_delay(delay)
    try:
        cluster.wait_job_processed()
        pause(2 * _hold(cluster))
    finally:
        cluster.proxy.heal()
    return cluster.record(fault)


def proxy_blackhole(cluster: Cluster) -> Fault:
    """Blackhole the scheduler's traffic past the lease; what was sent
    meanwhile is delivered late when it heals."""
    assert cluster.proxy is not None
    fault = Fault("proxy_blackhole", now_ms())
    cluster.proxy.blackhole()
    try:
        cluster.wait_job_processed()
        pause(_hold(cluster))
    finally:
        cluster.proxy.heal()
    return cluster.record(fault)


def proxy_reset(cluster: Cluster) -> Fault:
    """Reset every scheduler connection three times, then refuse new ones
    with RST for a lease."""
    assert cluster.proxy is not None
    fault = Fault("proxy_reset", now_ms())
    for _ in range(3):
        cluster.proxy.reset_all()
        pause(cluster.ttl_ms / 3000)
    cluster.proxy.reset_new = True
    try:
        cluster.proxy.reset_all()
        cluster.wait_job_processed()
        pause(cluster.ttl_ms / 1000)
    finally:
        cluster.proxy.heal()
    return cluster.record(fault)


#: Every fault by name.
FAULTS: dict[str, Callable[[Cluster], Fault]] = {
    f.__name__: f
    for f in (
        lease_deleted,
        lease_ttl_cut,
        flushall,
        flushdb,
        leader_sigstop,
        leader_kill9,
        leader_sigterm,
        leader_sighup,
        redis_debug_sleep,
        redis_client_pause,
        redis_sigstop,
        redis_restart_persistent,
        redis_restart_empty,
        proxy_latency,
        proxy_blackhole,
        proxy_reset,
    )
}

#: The faults the mixed sequence draws from (a cluster with a proxy and
#: persistence supports them all).
MIXABLE = list(FAULTS)
