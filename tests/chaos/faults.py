"""The faults, one function each: inject, hold, undo, and return what was
done as a :class:`Fault`.  Each waits on conditions (a new leader, a booted
worker) rather than on luck; fixed pauses are only the fault's own length.

The scheduler-side Redis faults (stalls, restarts, proxy trouble) never
touch the broker Redis, so workers must keep running plain jobs through
them: those faults send one and wait for it while the fault holds.
"""

from __future__ import annotations

import collections
import datetime as dt
import glob
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.store.ledger import BATCH_RECORD_MS
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.instances import Instance, Outage, now_ms, wait_for

from .cluster import PROFILE, Cluster, Fault, pause

__all__ = ["FAULTS", "KNOWN_BUGS", "MIXABLE", "NEEDS_OWN_CLUSTER"]


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


def _handover(cluster: Cluster, kind: str, *, group: bool) -> Fault:
    """SIGTERM the leader's instance and time the handover, polling the
    lease every 2 ms: ``release_ms`` from the signal until the lease is
    gone or held by another process, ``takeover_gap_ms`` from then until a
    process of another instance leads."""
    instance, pid = cluster.leader_instance()
    others = {p for i in cluster.instances if i is not instance for p in i.worker_pids()}
    fault = Fault(kind, now_ms(), detail=f"pid {pid}")
    signalled = time.monotonic()
    if group:
        # systemd's KillMode=control-group: every process of the group at
        # once; dramatiq's main process then forwards a second SIGTERM.
        os.killpg(instance.pid, signal.SIGTERM)
    else:
        instance.signal(signal.SIGTERM)  # docker stop: the main process only
    wait_for(lambda: cluster.leader_pid() != pid, timeout=30, interval=0.002, what="the lease to be released")
    released = time.monotonic()
    wait_for(lambda: cluster.leader_pid() in others, timeout=30, interval=0.002, what="another instance to lead")
    led = time.monotonic()
    assert instance.proc is not None
    try:
        status = instance.proc.wait(20)  # one signal only: a second one would mean "exit now"
    except subprocess.TimeoutExpired:
        instance.kill9()
        raise AssertionError(f"{instance.name} did not stop within 20 s of SIGTERM") from None
    fault.figures = {
        "release_ms": round((released - signalled) * 1000, 1),
        "takeover_gap_ms": round((led - released) * 1000, 1),
    }
    fault.detail += f" exit status {status}"
    # dramatiq exits 0 after a graceful stop; after a group stop its
    # workers die on the second signal, so its status is dramatiq's affair.
    assert group or status == 0, f"{instance.name} exited with {status} after SIGTERM"
    cluster.record(fault)
    cluster.replace(instance)
    return fault


def leader_sigterm(cluster: Cluster) -> Fault:
    """SIGTERM the leader's main process only (docker stop, Kubernetes):
    graceful, the lease is released at once."""
    return _handover(cluster, "leader_sigterm", group=False)


def leader_group_sigterm(cluster: Cluster) -> Fault:
    """SIGTERM the leader's whole process group (systemd's
    ``KillMode=control-group``, supervisord's ``stopasgroup``): each worker
    gets SIGTERM twice, once directly and once forwarded by dramatiq's main
    process, and dramatiq exits on the second."""
    return _handover(cluster, "leader_group_sigterm", group=True)


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


def replication_lag_master_kill(cluster: Cluster) -> Fault:
    """Hold replication back past the lease, then kill -9 the master and
    promote its replica: what the leader claimed in the lag is not on the
    new master.  No outage is declared: unconfirmed claims were never
    enqueued, and the ticks fire once after the failover."""
    assert cluster.replication is not None, "this fault needs a cluster with a replica"
    fault = Fault("replication_lag_master_kill", now_ms(), detail=f"{_hold(cluster):.2f} s of lag")
    cluster.replication.hold_replication()
    cluster.wait_job_processed()
    pause(_hold(cluster))
    cluster.fail_over()
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


def proxy_reply_hold(cluster: Cluster) -> Fault:
    """From 30 ms before a tick, deliver every request at once and hold
    every reply for twice the firing deadline (an asymmetric partition, a
    Redis stalling after it ran the command): the tick's claim runs, the
    leader steps down before it reads the reply, and settles the batch as a
    follower once replies flow.  What Redis granted must still be enqueued,
    once."""
    assert cluster.proxy is not None
    hold_ms = 2 * cluster.ttl_ms * 2 // 3
    pause((0.97 - time.time() % 1) % 1)  # to 30 ms before the next tick
    fault = Fault("proxy_reply_hold", now_ms(), detail=f"replies held {hold_ms} ms")
    cluster.proxy.set_reply_delay(hold_ms)
    try:
        pause(hold_ms / 1000)
    finally:
        cluster.proxy.heal()
    return cluster.record(fault)


# -- eviction pressure -------------------------------------------------------

#: Memory the lease Redis may use above what it used when the pressure began.
_HEADROOM = 1 << 20
#: Each burst writes this many times the headroom, so that after the older
#: filler keys, the scheduler's keys are evicted too.
_BURSTS_OF = 4
_VALUE = 64 << 10


class _Vanishings(threading.Thread):
    """Counts how often each watched key goes from present to absent
    (EXISTS does not touch a key's LRU clock, so watching changes nothing)."""

    def __init__(self, port: int, keys: dict[str, str]) -> None:
        super().__init__(name="vanishings", daemon=True)
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        self.keys = keys
        self.counts = dict.fromkeys(keys, 0)
        self.done = threading.Event()

    def run(self) -> None:
        present = dict.fromkeys(self.keys, True)
        while not self.done.wait(0.005):
            for name, key in self.keys.items():
                try:
                    now = bool(self.client.exists(key))
                except redis.RedisError:
                    continue
                if present[name] and not now:
                    self.counts[name] += 1
                present[name] = now

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.join(5)
        self.client.close()
        return self.counts


def _fill(port: int, *, seconds: float, every: float) -> int:
    """Write pressure from a filler client on loopback, in its own database
    (eviction spans every database): a burst of ``_BURSTS_OF`` headrooms of
    64 KB values every ``every`` seconds, each with a TTL so that
    ``volatile-*`` policies may evict them.  Stops by itself after
    ``seconds``; returns the number of values written."""
    filler = redis.Redis(host="127.0.0.1", port=port, db=1, socket_timeout=10)
    value = b"x" * _VALUE
    deadline = time.monotonic() + seconds
    written = 0
    try:
        while time.monotonic() < deadline:
            pipe = filler.pipeline(transaction=False)
            for _ in range(_BURSTS_OF * _HEADROOM // _VALUE):
                written += 1
                pipe.set(f"filler:{written}", value, ex=120)
            pipe.execute(raise_on_error=False)  # an OOM refusal is part of the pressure
            pause(every)  # the pressure's rhythm, not a wait for a condition
        filler.flushdb()
    finally:
        filler.close()
    return written


def eviction_pressure(cluster: Cluster) -> Fault:
    """Cap the lease Redis's memory just above its use and write bursts of
    filler past the cap for six seconds (4.5 in the short profile), so the cluster's
    ``maxmemory-policy`` evicts the scheduler's keys again and again.
    Under ``allkeys-*`` the ledger goes too: its losses are a declared
    outage, from the first burst until the first fire after the pressure.
    Under ``volatile-*`` only keys with a TTL (the lease, batch records)
    can go, and nothing may be lost."""
    policy = str(cluster.client.config_get("maxmemory-policy")["maxmemory-policy"])
    assert policy.startswith(("allkeys-", "volatile-")), f"the cluster's Redis does not evict ({policy})"
    wipes = policy.startswith("allkeys-")
    keys = {"ledger": cluster.keys.ticks, "epoch": cluster.keys.epoch, "lease": cluster.keys.lease}
    watch = _Vanishings(cluster.redis.port, keys)
    used = int(cluster.client.info("memory")["used_memory"])
    fault = Fault("eviction_pressure", now_ms(), wipes=wipes, detail=policy)
    watch.start()
    cluster.client.config_set("maxmemory", used + _HEADROOM)
    try:
        written = _fill(cluster.redis.port, seconds=6.0 if PROFILE == "full" else 4.5, every=1.5)
    finally:
        cluster.client.config_set("maxmemory", 0)
        counts = watch.stop()
    cluster.record(fault)
    cluster.wait_job_processed()
    # What fired while the pressure lasted (each tick counted once).
    during = [e for e in cluster.history.enqueues() if fault.start_ms <= e.at * 1000 <= fault.end_ms]
    fired = {(e.schedule, e.tick_ms) for e in during}
    seconds = (fault.end_ms - fault.start_ms) / 1000
    fault.figures = {
        **{f"{name}_evicted": float(n) for name, n in counts.items()},
        "filler_values": float(written),
        "fired_per_schedule_second": round(len(fired) / (seconds * len(cluster.schedule_ids())), 2),
    }
    return fault


# -- Redis clock steps (the lease Redis runs on a ClockShim) ------------------


def _redis_time_ms(cluster: Cluster) -> int:
    seconds, micros = cluster.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _step_redis_clock(cluster: Cluster, offset_s: int) -> int:
    """Step the lease Redis's wall clock to real time plus ``offset_s`` and
    check that ``TIME`` really moved; returns the jump (ms)."""
    shim = cluster.clock_shim
    assert shim is not None, "this fault needs Cluster(shimmed_clock=True)"
    before = _redis_time_ms(cluster)
    shift = (offset_s - shim.offset_s) * 1000
    shim.step_to(offset_s)
    jumped = _redis_time_ms(cluster) - before
    assert abs(jumped - shift) < 1000, f"the clock shim did not step TIME by {shift} ms (it moved {jumped} ms)"
    return jumped


def redis_clock_forward(cluster: Cluster) -> Fault:
    """Step the Redis host's clock an hour forward for six seconds, then
    back (an NTP step, undone).  Every key with a TTL expires at once (the
    lease: a leadership change is expected); nothing may fire early, and
    schedules fire normally once the step is undone."""
    fault = Fault("redis_clock_forward", now_ms(), detail="+3600 s for 6 s")
    jumped = _step_redis_clock(cluster, 3600)
    try:
        cluster.wait_job_processed()
        pause(6.0)
    finally:
        _step_redis_clock(cluster, 0)
    fault.figures = {"time_jump_ms": float(jumped)}
    return cluster.record(fault)


def redis_clock_back(cluster: Cluster) -> Fault:
    """Step the Redis host's clock 40 s back with the leader frozen, so its
    lease now lasts 40 s by Redis's clock, then kill -9 the leader: a
    follower must take over within about one lease by its own monotonic
    clock, not when the key expires.  Then the step is undone."""
    instance, pid = cluster.leader_instance()
    fault = Fault("redis_clock_back", now_ms(), detail=f"-40 s, then kill -9 of pid {pid}")
    # Frozen first, so that no renewal lands after the step.
    os.kill(pid, signal.SIGSTOP)
    frozen = time.monotonic()
    jumped = _step_redis_clock(cluster, -40)
    try:
        pttl = int(cluster.client.pttl(cluster.keys.lease))
        assert pttl > 30_000, f"the step did not stretch the lease's expiry (PTTL {pttl} ms)"
        instance.kill9()
        wait_for(lambda: cluster.leader_pid() not in (None, pid), timeout=60, interval=0.01, what="a new leader")
        took = time.monotonic() - frozen
        cluster.wait_job_processed()
    finally:
        _step_redis_clock(cluster, 0)
    fault.figures = {"time_jump_ms": float(jumped), "lease_pttl_at_kill_ms": float(pttl), "takeover_ms": took * 1000}
    cluster.record(fault)
    cluster.replace(instance)
    return fault


# -- the leader host's wall clock ----------------------------------------------


def _hand_lease_to(cluster: Cluster, target: Instance) -> Instance:
    """SIGTERM (graceful: the lease is released, prefetched messages go
    back to the queue) whichever other instance leads, restarting it, until
    ``target`` leads; returns ``target`` as it is then (restarted if it
    was the leader: a takeover is what the fault is about)."""
    for _ in range(len(cluster.instances) + 1):
        leader, _pid = cluster.leader_instance()
        was_target = leader is target
        assert leader.terminate() == 0, f"{leader.name} did not stop cleanly"
        fresh = cluster.replace(leader)
        if was_target:
            target = fresh
            continue
        wait_for(
            lambda t=target: cluster.leader_pid() in t.worker_pids(), timeout=30, interval=0.02, what="the handover"
        )
        return target
    raise AssertionError(f"{target.name} never took the lease")


def leader_wall_clock_off(cluster: Cluster) -> Fault:
    """Step the wall clock of instance 0 (a leader only: it consumes
    nothing) a minute back and hand it the lease: it takes over, syncs and
    fires, while the consumers keep the machine's clock.  Every message it
    sends must be stamped with the scheduler's clock, not its own: with
    ``max_age`` set, a message stamped a minute old is dropped by
    ``AgeLimit`` (judged from the actors' runs)."""
    shim = cluster.wall_clock
    assert shim is not None, "this fault needs Cluster(leader_wall_clock=True)"
    fault = Fault("leader_wall_clock_off", now_ms(), detail="-60 s")
    shim.step_to(-60)
    try:
        _hand_lease_to(cluster, cluster.instances[0])
        cluster.wait_fired_after(now_ms() + 2000, timeout=30)
        cluster.wait_job_processed()
    finally:
        shim.step_to(0)
    return cluster.record(fault)


# -- poisoned values ----------------------------------------------------------

#: How soon a poisoned schedule must fire again.
_RESUME_S = 5.0


def _poison(
    cluster: Cluster,
    name: str,
    write: Callable[[], object],
    *,
    names: str,
    victim: str = "",
    destroys: bool = False,
) -> Fault:
    """Write a bad value, then check that every schedule (the victim
    included) fires again within a few seconds and that a WARNING names
    the key (or the schedule whose ledger entry it was).  A value that
    overwrote the victim's ledger entry destroyed it: that schedule's
    ticks from the write to its next fire are a declared outage."""
    fault = Fault("poisoned_values", now_ms(), wipes=destroys, detail=name, schedules=(victim,) if destroys else ())
    write()
    fault.end_ms = now_ms()
    cluster.faults.append(fault)
    began = time.monotonic()
    for schedule in [victim] if victim else cluster.schedule_ids():
        cluster.wait_fired_after(fault.end_ms, timeout=_RESUME_S, schedule=schedule)
    fault.figures = {"resume_ms": round((time.monotonic() - began) * 1000)}
    wait_for(
        lambda: any(names in line for line in cluster.warnings()),
        timeout=_RESUME_S,
        what=f"a WARNING naming {names} ({name})",
    )
    return fault


def _current_epoch(cluster: Cluster) -> str:
    epoch: str = wait_for(lambda: cluster.lease().get("epoch"), timeout=30, what="a lease with an epoch")
    return epoch


def poisoned_values(cluster: Cluster) -> Fault:
    """An operator or a bug writes bad data: a ledger entry an hour in the
    future, a non-integer epoch counter (read at the next acquisition), a
    lease and a paused set of the wrong type.  Each is treated as missing
    with a WARNING naming the key, stops no other schedule, and the
    poisoned schedule fires again within a few seconds."""
    k = cluster.keys
    client = cluster.client
    second = cluster.schedule_ids()[1]
    _poison(
        cluster,
        "ledger entry an hour ahead",
        lambda: client.hset(k.ticks, second, f"{now_ms() + 3_600_000}:{_current_epoch(cluster)}:1"),
        names=second,
        victim=second,
        destroys=True,
    )

    def epoch() -> None:
        client.set(k.epoch, "not-a-number")
        client.delete(k.lease)  # the counter is read at the next acquisition

    _poison(cluster, "non-integer epoch", epoch, names=k.epoch)

    def lease() -> None:
        pipe = client.pipeline(transaction=True)
        pipe.delete(k.lease)
        pipe.set(k.lease, "garbage")
        pipe.execute()

    _poison(cluster, "lease of the wrong type", lease, names=k.lease)
    try:
        fault = _poison(cluster, "paused of the wrong type", lambda: client.set(k.paused, "garbage"), names=k.paused)
    finally:
        client.delete(k.paused)
    return fault


def poisoned_ledger_entries(cluster: Cluster) -> Fault:
    """``HSET {p}:ticks <schedule> <ms>`` (an operator "resetting" a
    schedule without the epoch), then ``"garbage"`` in another schedule's
    entry: each entry is treated as missing (a new baseline) with a
    WARNING naming the schedule, and the others keep firing."""
    first, second = cluster.schedule_ids()[:2]
    _poison(
        cluster,
        "ledger entry without its epoch",
        lambda: cluster.client.hset(cluster.keys.ticks, first, str(now_ms())),
        names=first,
        victim=first,
        destroys=True,
    )
    return _poison(
        cluster,
        "ledger entry of garbage",
        lambda: cluster.client.hset(cluster.keys.ticks, second, "garbage"),
        names=second,
        victim=second,
        destroys=True,
    )


def poisoned_batch_record(cluster: Cluster) -> Fault:
    """A batch record is read only when a claim's reply was lost.  So:
    hold every reply back (requests still run at once) from just before a
    tick, overwrite the claim's result record with garbage the moment Redis
    writes it (a keyspace notification), and let the leader settle the
    batch from that garbage.  The record was the only proof of what that
    batch granted: its ticks are a declared outage.  Nothing else may be
    lost, and a WARNING must name the key."""
    assert cluster.proxy is not None, "this fault needs the proxy"
    client = cluster.client
    client.config_set("notify-keyspace-events", "K$")
    listener = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    listener.psubscribe(f"__keyspace@0__:{cluster.keys.tag}:batch:*")
    poisoned = ""
    fault = Fault("poisoned_values", now_ms(), wipes=True, detail="batch record of garbage")
    try:
        for _ in range(5):  # a renewal may win the race for the first lost reply: try the next tick
            # Start just before a tick, so the claim is the first reply lost.
            pause((0.97 - time.time() % 1) % 1)
            # Only a claim that runs from now on has its reply lost: the
            # notifications of earlier ones (the catch-up after the last
            # try) are stale, and a record whose reply the leader read is
            # never read again (poisoning one made this wait for a settle
            # that never comes).
            while listener.get_message(timeout=0) is not None:
                pass
            cluster.proxy.set_reply_delay(500)
            fault.start_ms = now_ms()
            held_from = _server_ms(client)
            deadline = time.monotonic() + 1.0
            while not poisoned and time.monotonic() < deadline:
                message = listener.get_message(timeout=0.1)
                if message and message["data"] == "set":
                    key = str(message["channel"]).split(":", 1)[1]
                    written = _server_ms(client) - (BATCH_RECORD_MS - int(client.pttl(key)))
                    if written < held_from:
                        continue  # a claim from before the hold, in flight
                    client.set(key, "garbage")
                    poisoned = key
                    fault.end_ms = now_ms()
            if poisoned:
                break
            cluster.proxy.heal()
            cluster.wait_fired_after(now_ms(), timeout=30)
        assert poisoned, "no claim ran while replies were held back"
        # The claim's reply is lost; once replies flow again (a new
        # connection's handshake waits for one too), the leader settles the
        # batch from the garbage, and the record turns to "void".  Unless
        # redis-py's retry of the claim ran after the garbage was written:
        # that run answers from the ledger and writes the record anew, and
        # the leader settles from a good record (nothing to report then).
        pause(0.3)
        cluster.proxy.heal()
        wait_for(lambda: client.get(poisoned) != "garbage", timeout=60, what="the leader to settle the poisoned batch")
        read_garbage = client.get(poisoned) == "void"
    finally:
        cluster.proxy.heal()
        listener.close()
        client.config_set("notify-keyspace-events", "")
    cluster.faults.append(fault)
    cluster.wait_fired_after(now_ms(), timeout=30)
    # The record was the proof: what the batch granted is in the history
    # stream as fired, but was never enqueued.
    enqueued = {(e.schedule, e.tick_ms) for e in cluster.history.enqueues()}
    entries: list[tuple[str, dict[str, str]]] = client.xrange(  # type: ignore[assignment]
        cluster.keys.history, min=f"{fault.start_ms - 1000}", max="+"
    )
    fired = {(f["schedule"], int(f["tick"])) for _, f in entries if f.get("outcome") == "fired"}
    fault.figures = {"fired_never_enqueued": float(len(fired - enqueued)), "garbage_read": float(read_garbage)}
    if not read_garbage:
        return fault
    wait_for(
        lambda: any(f"{cluster.keys.tag}:batch" in line for line in cluster.warnings()),
        timeout=_RESUME_S,
        what=(
            f"a WARNING naming the batch record {poisoned} (the batch's granted ticks recorded fired but "
            f"never enqueued: {len(fired - enqueued)})"
        ),
    )
    return fault


def _server_ms(client: redis.Redis) -> int:
    """Redis's clock, ms."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


class _Churn:
    """The runtime schedules one churn fault writes, and what it did to
    each: ``(kind, from ms, to ms)`` with kind ``add``, ``same`` (a
    replacement with the same ticks), ``shape`` (other ticks: another
    zone, so the per-second grid stays) or ``remove``, timed by the server
    (a write's ``updated_ms``) or around the call (a removal)."""

    def __init__(self, cluster: Cluster, names: list[str]) -> None:
        self.store = RuntimeSchedules(
            redis.Redis.from_url(cluster.redis.url, decode_responses=True),
            cluster.keys,
            resolve_actor=lambda actor: ActorInfo("tick_0", "default"),
        )
        self.ids = [f"tick_0:{name}" for name in names]
        self.events: dict[str, list[tuple[str, int, int]]] = {sid: [] for sid in self.ids}
        self.zone = {sid: "UTC" for sid in self.ids}

    def write(self, sid: str, kind: str) -> None:
        name = sid.split(":", 1)[1]
        if kind == "remove":
            before = now_ms()
            assert self.store.remove("tick_0", name)
            self.events[sid].append((kind, before, now_ms()))
            return
        if kind == "shape":
            self.zone[sid] = "Europe/Paris" if self.zone[sid] == "UTC" else "UTC"
        kwargs = {"n": len(self.events[sid])} if kind == "same" else {}
        stored = self.store.add("tick_0", Schedule("* * * * * *", timezone=self.zone[sid], kwargs=kwargs), name=name)
        self.events[sid].append((kind, stored.updated_ms, stored.updated_ms))

    def unexpected(self, enqueued: dict[str, set[int]]) -> list[Outage]:
        """The spans in which a schedule's ticks are not expected: before
        its first write; from its last tick fired before a removal to the
        next add; from its last tick fired before a write with other ticks
        to that write (the old definition's ticks it replaced)."""
        out: list[Outage] = []
        for sid, events in self.events.items():
            ticks = enqueued.get(sid, set())
            gap_from: int | None = 0  # not expected from here until the next add
            for kind, _, hi in events:
                last = max((t for t in ticks if t <= hi), default=0)
                if kind == "add" and gap_from is not None:
                    out.append((gap_from, hi, sid))
                    gap_from = None
                elif kind == "shape":
                    out.append((last + 1, hi, sid))
                elif kind == "remove":
                    gap_from = last + 1
            if gap_from is not None:
                out.append((gap_from, 2**62, sid))
        return out


def _stranded(cluster: Cluster) -> set[tuple[str, int]]:
    """(schedule, tick) of the messages a killed worker had fetched and not
    acknowledged: dramatiq requeues them once that worker is seen dead,
    which a short run need not reach, so they are not the scheduler's."""
    client = cluster.broker_redis.client()
    ids = [m for key in client.keys("dramatiq:__acks__.*") for m in client.smembers(key)]  # type: ignore[union-attr]
    out: set[tuple[str, int]] = set()
    for body in client.hmget("dramatiq:default.msgs", ids) if ids else []:
        options = json.loads(body or "{}").get("options", {})
        if "cron_schedule" in options:
            tick = int(dt.datetime.fromisoformat(options["cron_tick"]).timestamp() * 1000)
            out.add((options["cron_schedule"], tick))
    return out


def _runs(cluster: Cluster) -> list[tuple[str, int, float]]:
    """(schedule, tick ms, wall time) of every run the actors recorded."""
    out = []
    for path in glob.glob(os.path.join(cluster.record_dir, "runs-*.jsonl")):
        for line in Path(path).read_text().splitlines():
            try:
                run = json.loads(line)
            except ValueError:  # a line cut by SIGKILL mid-write
                continue
            if run.get("schedule") and run.get("tick"):
                out.append((run["schedule"], int(dt.datetime.fromisoformat(run["tick"]).timestamp() * 1000), run["at"]))
    return out


def runtime_churn(cluster: Cluster) -> Fault:
    """Replace (same ticks, other ticks), remove and re-add runtime
    schedules right after kill -9 of the leader, twice, then remove them.
    Judged per (schedule, tick) from the actors' runs as well as from the
    enqueues: no duplicate; no loss, except a definition's ticks before its
    write and after its removal (declared as not expected); and nothing
    enqueued or run after ``remove()`` returned."""
    n = len(cluster.faults)
    churn = _Churn(cluster, [f"churn{n}a", f"churn{n}b", f"churn{n}c"])
    fault = Fault("runtime_churn", now_ms(), detail=", ".join(churn.ids))
    for sid in churn.ids:
        churn.write(sid, "add")
    for sid in churn.ids:
        cluster.wait_fired_after(churn.events[sid][-1][2], timeout=30, schedule=sid)
    a, b, c = churn.ids
    for _ in range(2):
        instance, pid = cluster.leader_instance()
        instance.kill9()
        # While nobody leads: an edit of its arguments, other ticks, a removal.
        churn.write(a, "same")
        churn.write(b, "shape")
        churn.write(c, "remove")
        wait_for(lambda: cluster.leader_pid() not in (None, pid), timeout=30, interval=0.05, what="a new leader")  # noqa: B023
        cluster.replace(instance)
        churn.write(c, "add")  # added again
        for sid in churn.ids:
            cluster.wait_fired_after(churn.events[sid][-1][2], timeout=30, schedule=sid)
    for sid in churn.ids:
        churn.write(sid, "remove")
    cluster.removed_schedules.update(churn.ids)
    cluster.record(fault)
    cluster.wait_fired_after(now_ms() + 1000)

    enqueues = [e for e in cluster.history.enqueues() if e.schedule in churn.ids]
    enqueued: dict[str, set[int]] = {sid: set() for sid in churn.ids}
    for e in enqueues:
        enqueued[e.schedule].add(e.tick_ms)
    fault.unexpected = churn.unexpected(enqueued)

    def expected(sid: str) -> list[int]:
        first = churn.events[sid][0][2] // 1000 * 1000 + 1000
        spans = [(lo, hi) for lo, hi, who in fault.unexpected if who == sid]
        return [t for t in range(first, fault.end_ms, 1000) if not any(lo <= t <= hi for lo, hi in spans)]

    # Every enqueued tick runs (or sits with a killed worker, see _stranded).
    def unrun() -> set[tuple[str, int]]:
        ran = {(sid, tick) for sid, tick, _ in _runs(cluster)}
        return {(e.schedule, e.tick_ms) for e in enqueues} - ran - _stranded(cluster)

    wait_for(lambda: not unrun(), timeout=30, what="every enqueued churn tick to run")
    runs = [r for r in _runs(cluster) if r[0] in churn.ids]
    counted = collections.Counter((sid, tick) for sid, tick, _ in runs)
    duplicates = [key for key, count in counted.items() if count > 1]
    stranded = _stranded(cluster)
    lost = [(sid, t) for sid in churn.ids for t in expected(sid) if (sid, t) not in counted.keys() | stranded]
    after_removal = []
    for sid, events in churn.events.items():
        for i, (kind, called, removed) in enumerate(events):
            if kind != "remove":
                continue
            until = events[i + 1][1] if i + 1 < len(events) else 2**62
            # No enqueue after remove() returned, and no run of a tick after
            # it was called (a message enqueued just before may run just after).
            after_removal += [(sid, e.tick_ms) for e in enqueues if e.schedule == sid and removed < e.at * 1000 < until]
            after_removal += [(sid, t) for sid2, t, _ in runs if sid2 == sid and called < t < until]
    fault.figures = {
        "runs_judged": float(sum(len(expected(sid)) for sid in churn.ids)),
        "stranded_with_killed_workers": float(len({(e.schedule, e.tick_ms) for e in enqueues} & stranded)),
    }
    assert not duplicates, f"runtime churn: ticks run twice: {duplicates[:5]}"
    assert not lost, f"runtime churn: {len(lost)} ticks never ran: {lost[:5]} (events {churn.events})"
    assert not after_removal, f"runtime churn: fired after remove() returned: {after_removal[:5]}"
    return fault


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
        leader_group_sigterm,
        leader_sighup,
        redis_debug_sleep,
        redis_client_pause,
        redis_sigstop,
        redis_restart_persistent,
        redis_restart_empty,
        replication_lag_master_kill,
        proxy_latency,
        proxy_blackhole,
        proxy_reset,
        proxy_reply_hold,
        poisoned_values,
        poisoned_ledger_entries,
        poisoned_batch_record,
        eviction_pressure,
        redis_clock_forward,
        redis_clock_back,
        runtime_churn,
        leader_wall_clock_off,
    )
}

#: Faults whose scenario reveals a product bug not fixed yet: each is
#: expected to fail (strictly) and stays out of the mixed sequence and the
#: soak until it passes.
KNOWN_BUGS: dict[str, str] = {}

#: Faults that need a cluster of their own: an evicting ``maxmemory-policy``,
#: a lease Redis on a clock shim, a leader on a wall clock of its own, or a
#: lease Redis with a replica (the soak has one).
NEEDS_OWN_CLUSTER = {
    "eviction_pressure",
    "redis_clock_forward",
    "redis_clock_back",
    "leader_wall_clock_off",
    "replication_lag_master_kill",
}

#: The faults the mixed sequence draws from (a cluster with a proxy and
#: persistence supports them all).
MIXABLE = [kind for kind in FAULTS if kind not in NEEDS_OWN_CLUSTER and kind not in KNOWN_BUGS]
