"""The core guarantees, each pinned against a real redis-server and real
``dramatiq`` processes running tests/apps/cronapp.py (a per-second schedule,
``lock_ttl=2000``).  Every enqueue is recorded by the app and judged by
:class:`tests.support.instances.History`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.support.instances import EARLY_TOLERANCE_MS, ROOT, History, Instance, alive, now_ms, wait_for
from tests.support.lease_events import lease_events, lease_gone
from tests.support.redis_server import RedisServer

TTL_MS = 2000
SCHEDULE = "tick_0"
LEASE = "{dramatiq-cron}:lease"

Start = Callable[..., Instance]


def leader_pid(server: RedisServer) -> int | None:
    """The worker process that holds the lease, according to Redis."""
    try:
        pid = server.client().hget(LEASE, "pid")
    except Exception:
        return None
    return int(pid) if pid else None


def owner(pid: int, instances: list[Instance]) -> Instance:
    for instance in instances:
        if pid in instance.worker_pids():
            return instance
    raise AssertionError(f"pid {pid} belongs to none of the instances")


def wait_for_ticks(history: History, count: int, *, after_ms: int, timeout: float = 60) -> None:
    wait_for(
        lambda: len([t for t in history.ticks(SCHEDULE) if t > after_ms]) >= count,
        timeout=timeout,
        what=f"{count} ticks after {after_ms}",
    )


def leading_pair(
    instances: Start, env: dict[str, str], history: History, server: RedisServer
) -> tuple[list[Instance], int, int]:
    """Two instances of the app, a leader elected and two ticks fired:
    returns the instances, the leader's pid and when the ticks were judged
    from (epoch ms)."""
    group = [instances(env) for _ in range(2)]
    leader = wait_for(lambda: leader_pid(server), timeout=30, what="a leader")
    start = now_ms()
    wait_for_ticks(history, 2, after_ms=start)
    return group, leader, start


def assert_quiet(instance: Instance) -> None:
    """No traceback in an instance's log."""
    assert "Traceback" not in instance.log(), instance.log()[-3000:]


def test_each_tick_is_enqueued_once_across_processes_and_instances(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Given two dramatiq instances with two processes and two threads each,
    all competing, when they run for several ticks, then every tick in the
    window was enqueued exactly once, each by a process that had won the
    lease.  (Which one, and how often it changed hands, is up to the
    machine: a renewal starved past the lease hands it over, legitimately.)"""
    group = [instances(app_env, processes=2, threads=2) for _ in range(2)]
    wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader")
    start = now_ms()
    wait_for_ticks(history, 6, after_ms=start)
    end = now_ms() - 1500
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=end)
    assert verdict.expected >= 4
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    leaders = {pid for instance in group for pid, _ in instance.leader_pids()}
    assert {e.pid for e in history.enqueues()} <= leaders, "a process that never led enqueued"
    for instance in group:
        assert_quiet(instance)


def test_deleting_the_lease_key_repeatedly_never_duplicates(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Given a leader and a follower, when the lease key is deleted six
    times, about a second apart, then no tick is enqueued twice, the
    deposed leader logs one WARNING per loss without a traceback, and the
    processes keep competing (new epochs are acquired)."""
    group = [instances(app_env) for _ in range(2)]
    wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader")
    client = redis_server.client()
    start = now_ms()
    deletions = 0
    while deletions < 6:  # counted as they happen: a loaded machine re-acquires later, not less
        wait_for(lambda: client.exists(LEASE), timeout=30, what="a lease to delete")
        deletions += client.delete(LEASE)
        time.sleep(0.9)
    wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader after the deletions")
    wait_for_ticks(history, 3, after_ms=now_ms())
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates, verdict.summary()
    logs = "".join(i.log() for i in group)
    losses = logs.count("Lost cron leadership")
    assert 1 <= losses <= deletions, logs[-3000:]
    assert max(e for i in group for _, e in i.leader_pids()) >= 3
    for instance in group:
        assert_quiet(instance)


def test_a_leader_paused_past_its_lease_cannot_enqueue_when_it_wakes(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Given a leader process, when it is SIGSTOPped for twice its lease and
    then resumed, then another process took over, and the woken process
    enqueues nothing while the other leads: no tick is enqueued twice."""
    group, paused, start = leading_pair(instances, app_env, history, redis_server)
    os.kill(paused, signal.SIGSTOP)
    try:
        wait_for(
            lambda: (leader_pid(redis_server) or paused) != paused,
            timeout=30,
            what="another process to take over",
        )
        time.sleep(TTL_MS / 1000)  # stay paused past the lease (the pause is the fault)
    finally:
        os.kill(paused, signal.SIGCONT)
    resumed = time.time()
    wait_for_ticks(history, 4, after_ms=int(resumed * 1000))
    late = [e for e in history.enqueues() if e.pid == paused and e.at > resumed]
    assert not late, f"the paused leader enqueued after waking: {late}"
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    assert "Lost cron leadership" in owner(paused, group).log()
    for instance in group:
        assert_quiet(instance)


def test_after_kill_9_another_instance_takes_over_and_catches_up(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Given two instances, when the leader's whole instance is killed with
    SIGKILL, then the other takes over and fires the ticks missed in the
    gap, late, once each.  (How long the takeover takes is a benchmark's
    figure: docs/benchmarks.md.)"""
    group, first, start = leading_pair(instances, app_env, history, redis_server)
    victim = owner(first, group)
    killed = time.monotonic()
    victim.kill9()
    killed_ms = now_ms()  # the victim runs no line after this
    successor = wait_for(lambda: (p := leader_pid(redis_server)) and p != first and p, timeout=30, what="a new leader")
    takeover = time.monotonic() - killed
    survivor = owner(successor, group)
    # The successor's own account of when it led: the host's poll of the
    # lease can notice it later than that on a loaded machine.
    acquired_ms = wait_for(
        lambda: min(survivor.acquired_at(pid=successor, after_ms=killed_ms), default=None),
        timeout=30,
        what="the successor to log its acquisition",
    )
    wait_for_ticks(history, 3, after_ms=now_ms())
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    print(f"takeover after kill -9: {takeover * 1000:.0f} ms")
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    # The ticks that fell due between the kill and the acquisition were
    # fired by the successor, once it led: late, and once each (above).
    gap = [e for e in history.enqueues() if killed_ms + EARLY_TOLERANCE_MS < e.tick_ms < acquired_ms]
    assert gap, f"no tick fell in the takeover gap ({killed_ms} to {acquired_ms})"
    late = [e for e in gap if e.pid != successor or e.at * 1000 < acquired_ms]
    assert not late, (late, acquired_ms)
    assert_quiet(survivor)


def test_sigterm_releases_the_lease_and_a_follower_takes_over(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """The leader releases its lease (it says so; a lapse would not) and a
    follower leads, with no tick lost or doubled."""
    group, first, start = leading_pair(instances, app_env, history, redis_server)
    victim = owner(first, group)
    stopped = time.monotonic()
    victim.signal(signal.SIGTERM)
    wait_for(lambda: (p := leader_pid(redis_server)) and p != first, timeout=30, interval=0.005, what="a new leader")
    takeover = time.monotonic() - stopped
    print(f"takeover after SIGTERM: {takeover * 1000:.0f} ms")
    assert victim.proc is not None and victim.proc.wait(30) == 0
    assert "Released cron leadership" in victim.log()
    wait_for_ticks(history, 3, after_ms=now_ms())
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    for instance in group:
        assert_quiet(instance)


def test_redis_restart_keeps_workers_up_and_never_refires_old_ticks(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer, record_dir: str
) -> None:
    """Given instances whose lease Redis is stopped (the broker lives on
    another Redis), when it comes back empty (no persistence), then the
    workers kept processing messages, logged one WARNING per state change
    and no traceback, scheduling resumed, and no tick from before the
    restart was enqueued again."""
    with RedisServer() as broker_redis:
        env = {**app_env, "CRON_APP_BROKER": broker_redis.url}
        group = [instances(env) for _ in range(2)]
        wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader")
        wait_for_ticks(history, 2, after_ms=now_ms())
        fired_before = set(history.ticks(SCHEDULE))
        redis_server.stop()
        down_at = now_ms()
        time.sleep(TTL_MS / 1000 * 1.5)  # the outage itself
        # Workers keep processing while the lease Redis is down.
        from dramatiq import Message
        from dramatiq.brokers.redis import RedisBroker

        sender = RedisBroker(url=broker_redis.url)
        for n in range(3):
            sender.enqueue(Message(queue_name="default", actor_name="plain_job", args=(n,), kwargs={}, options={}))
        wait_for(lambda: jobs_done(record_dir) >= 3, timeout=30, what="plain jobs processed during the outage")
        redis_server.start()
        back = time.monotonic()
        wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader after the restart")
        wait_for(
            lambda: [t for t in history.ticks(SCHEDULE) if t > now_ms() - 1500 and t not in fired_before],
            timeout=30,
            what="scheduling to resume",
        )
        resumed = time.monotonic() - back
        print(f"scheduling resumed {resumed * 1000:.0f} ms after Redis came back")
        refired = [e for e in history.enqueues() if e.tick_ms in fired_before]
        assert len(refired) == len(fired_before), "an old tick was enqueued again"
        # The outage's ticks are lost (the ledger came back empty: it starts
        # from now), so only duplicates are judged, over the whole history:
        # no settling to wait for (it waited a minute for those losses).
        verdict = history.judge(schedules=[SCHEDULE], start_ms=down_at - 5000, end_ms=now_ms() - 1500, settle_s=0)
        assert not verdict.duplicates, verdict.summary()
        for instance in group:
            assert instance.proc is not None and instance.proc.poll() is None, "an instance died"
            assert_quiet(instance)
            log = instance.log()
            assert log.count("cannot reach Redis") <= instance.processes, log[-3000:]


def jobs_done(record_dir: str) -> int:
    total = 0
    for name in os.listdir(record_dir):
        if name.startswith("jobs-"):
            with open(os.path.join(record_dir, name)) as f:
                total += sum(1 for line in f if line.strip())
    return total


def run_app(
    directory: str, name: str, cron_line: str, middleware: str, env: dict[str, str], broker: str = "StubBroker()"
) -> tuple[int, str]:
    """Write a one-actor app and run ``dramatiq`` on it until it exits."""
    with open(os.path.join(directory, f"{name}.py"), "w") as f:
        f.write(
            "import dramatiq\n"
            "from dramatiq.brokers.stub import StubBroker\n"
            "from dramatiq.brokers.rabbitmq import RabbitmqBroker\n"
            "from dramatiq_cron_middleware import CronMiddleware\n"
            f"broker = {broker}\n"
            f"broker.add_middleware({middleware})\n"
            "dramatiq.set_broker(broker)\n"
            f"@dramatiq.actor(cron={cron_line!r})\n"
            "def nightly():\n    pass\n"
        )
    dramatiq_bin = os.path.join(os.path.dirname(sys.executable), "dramatiq")
    proc = subprocess.run(
        [dramatiq_bin, name, "--processes", "1", "--threads", "1", "--path", directory],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_bad_cron_expression_stops_the_worker_at_import(tmp_path: object) -> None:
    """A bad expression must reach the user: ``dramatiq`` exits non-zero with
    a message naming the actor and the expression, before any worker runs."""
    code, output = run_app(
        str(tmp_path), "badapp", "61 * * * *", "CronMiddleware(redis='redis://127.0.0.1:1')", dict(os.environ)
    )
    assert code != 0
    assert "CronScheduleError" in output and "'nightly'" in output and "'61 * * * *'" in output, output


def test_no_redis_configured_is_one_clear_error_at_boot(tmp_path: object) -> None:
    """On a broker that is neither a RedisBroker nor a StubBroker (which runs
    with the scheduler off: tests/test_stub_broker.py)."""
    env = {k: v for k, v in os.environ.items() if k != "DRAMATIQ_CRON_REDIS_URL"}
    broker = "RabbitmqBroker(url='amqp://127.0.0.1:1')"
    code, output = run_app(str(tmp_path), "noredis", "* * * * *", "CronMiddleware()", env, broker=broker)
    assert code != 0, output
    assert output.count("no Redis configured") == 1, output
    assert "DRAMATIQ_CRON_REDIS_URL" in output


@pytest.mark.parametrize("extra", [["--use-spawn"], []], ids=["spawn", "fork"])
def test_sighup_reload_and_spawned_workers_keep_exactly_once(
    extra: list[str], app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Works under ``--processes 2 --threads 2``, with ``--use-spawn`` and
    across a SIGHUP reload of every worker process."""
    instance = instances(app_env, processes=2, threads=2, extra=extra)
    wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader")
    start = now_ms()
    wait_for_ticks(history, 2, after_ms=start)
    old_workers = set(instance.worker_pids())
    instance.signal(signal.SIGHUP)
    wait_for(
        lambda: (p := leader_pid(redis_server)) and p not in old_workers and alive(p),
        timeout=30,
        what="a leader among the reloaded workers",
    )
    wait_for_ticks(history, 3, after_ms=now_ms())
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    assert_quiet(instance)


def test_with_fast_takeover_a_killed_leader_is_replaced_well_within_its_lease(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Given ``fast_takeover=200`` and a 4 s lease, when the leader's instance
    is killed with SIGKILL (its sockets close), then a follower notices the
    leader's registered connection is gone and deposes it (it says so)
    instead of waiting for the lease, with no tick lost or doubled."""
    env = {**app_env, "CRON_APP_TTL": "4000", "CRON_APP_FAST_TAKEOVER": "200"}
    group, first, start = leading_pair(instances, env, history, redis_server)
    killed = time.monotonic()
    owner(first, group).kill9()
    successor = wait_for(lambda: (p := leader_pid(redis_server)) and p != first and p, timeout=30, what="a new leader")
    takeover = time.monotonic() - killed
    print(f"takeover after kill -9 with fast_takeover=200: {takeover * 1000:.0f} ms")
    wait_for_ticks(history, 3, after_ms=now_ms())
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    survivor = owner(successor, group)
    assert "connection to Redis is gone" in survivor.log()
    assert_quiet(survivor)


def test_a_control_group_stop_releases_the_lease_before_the_worker_exits(
    app_env: dict[str, str], instances: Start, history: History, redis_server: RedisServer
) -> None:
    """Given two instances, when the leader's whole process group gets
    SIGTERM at once (systemd's KillMode=control-group, supervisord's
    stopasgroup): each worker process receives it twice, once directly and
    once forwarded by dramatiq's main process, and dramatiq exits on the
    second.  Then the lease is released anyway (Redis reports the key
    deleted, not expired) and a follower leads, every time.  (The old
    leader lost the release in about half the runs, and the follower
    waited a whole lease.)"""
    group = [instances(app_env) for _ in range(2)]
    listener = lease_events(redis_server.client())
    for round_ in range(3):
        first = wait_for(lambda: leader_pid(redis_server), timeout=30, what="a leader")
        victim = owner(first, group)
        while listener.get_message(timeout=0) is not None:  # the acquisition's and renewals' events
            pass
        os.killpg(victim.pid, signal.SIGTERM)
        how = lease_gone(listener, timeout=TTL_MS / 1000 + 30) or "still held"
        assert how == "del", f"round {round_}: the lease was not released ({how})"
        wait_for(
            lambda first=first: (p := leader_pid(redis_server)) and p != first,
            timeout=30,
            interval=0.005,
            what="a new leader",
        )
        assert victim.proc is not None
        victim.proc.wait(30)
        # The handler does not log (logging takes locks); the worker may be
        # gone before its leader thread reports the release: Redis's own
        # report of the key deleted, not expired, is what shows it.
        group[group.index(victim)] = instances(app_env)
    listener.close()
    start = now_ms()
    wait_for_ticks(history, 2, after_ms=start)
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates, verdict.summary()
