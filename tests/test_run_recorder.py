"""The worker side's fail-open (monitoring/recorder.py), in-process on the
memory store with an injected fault and clock."""

from __future__ import annotations

import logging
import threading

import pytest
from dramatiq import Message
from dramatiq.broker import MessageProxy

from dramatiq_cron_middleware.monitoring.recorder import RECORD_TIMEOUT_MS, RunRecorder
from dramatiq_cron_middleware.store.in_memory import MemoryRuns, MemoryServer
from dramatiq_cron_middleware.store.runs import ALIVE_MS
from tests.support.faults import FaultyServer
from tests.support.instances import wait_for


def cron_message(second: int) -> MessageProxy:
    options = {"cron_tick": f"2030-01-01T00:00:{second:02d}+00:00", "cron_schedule": "report"}
    return MessageProxy(Message(queue_name="default", actor_name="report", args=(), kwargs={}, options=options))


def test_while_redis_fails_records_are_dropped_at_once_with_one_warning_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FaultyServer(now_ms=lambda: 1_900_000_000_000)
    runs = MemoryRuns(server)
    clock = [100.0]
    recorder = RunRecorder(
        runs_factory=lambda: runs, logger=logging.getLogger("runs"), retry_after=1.0, monotonic=lambda: clock[0]
    )
    server.refuse("record_run", times=1)
    with caplog.at_level(logging.INFO, logger="runs"):
        recorder.started(cron_message(1))  # refused: the episode starts
        clock[0] += 0.5
        recorder.started(cron_message(2))  # within a second: dropped without trying (Redis is back)
        clock[0] += 0.6
        recorder.started(cron_message(3))
    assert [e.tick_ms % 60_000 for e in server.run_events] == [3000]
    assert [(r.levelname, r.getMessage().split(" (")[0]) for r in caplog.records] == [
        ("WARNING", "Could not record the start of a run of report"),
        # the episode's one WARNING was its start; its end counts the losses
        ("INFO", "Recording runs works again; 2 run record(s) were lost meanwhile"),
    ]
    assert recorder.lost == 2
    recorder.close()


def test_other_messages_are_not_recorded() -> None:
    server = MemoryServer(now_ms=lambda: 0)
    recorder = RunRecorder(runs_factory=lambda: MemoryRuns(server), logger=logging.getLogger("runs"))
    plain = MessageProxy(Message(queue_name="default", actor_name="job", args=(), kwargs={}, options={}))
    recorder.started(plain)
    recorder.processed(plain, None)
    recorder.settled(plain, rejected=False)
    assert server.run_events == []


def heartbeats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cron-run-heartbeat"]


def test_a_running_run_is_beaten_for_until_it_settles_and_then_the_thread_ends() -> None:
    """The leader tells a live worker's long run from a dead one by this
    heartbeat: refreshed while the run runs, gone once it settled, and no
    thread left behind in a process that runs no cron message."""
    now = [1_900_000_000_000]
    server = MemoryServer(now_ms=lambda: now[0])
    runs = MemoryRuns(server)
    recorder = RunRecorder(runs_factory=lambda: runs, logger=logging.getLogger("runs"), beat=0.01)
    message = cron_message(1)
    member = "r|1893456001000|report"
    recorder.started(message)
    assert server.runs_alive == {member: now[0] + ALIVE_MS}
    now[0] += 5_000
    wait_for(lambda: server.runs_alive.get(member) == now[0] + ALIVE_MS, timeout=30, what="a heartbeat")
    recorder.processed(message, None)
    recorder.settled(message, rejected=False)
    assert member not in server.runs_alive
    wait_for(lambda: not heartbeats(), timeout=30, what="the heartbeat thread's end")
    recorder.close()


def test_records_get_a_timeout_of_their_own_at_a_short_lease() -> None:
    """Issue 28 item 9: at a 2 s lease the scheduler's operation timeout is
    333 ms, which dropped run records under CPU load; records wait at least
    RECORD_TIMEOUT_MS."""
    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    from dramatiq_cron_middleware import CronMiddleware

    broker = StubBroker()
    cron = CronMiddleware(redis="redis://127.0.0.1:1/0", lock_ttl=2000)
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="report", broker=broker, cron="0 3 * * *")
    assert cron.timing.op_timeout_ms < RECORD_TIMEOUT_MS
    recorder = cron._runs(broker, cron_message(1))
    assert isinstance(recorder, RunRecorder)
    store = recorder._get_runs()
    timeout = store.client.connection_pool.connection_kwargs["socket_timeout"]  # type: ignore[attr-defined]
    assert timeout * 1000 >= RECORD_TIMEOUT_MS
    cron.stop()
