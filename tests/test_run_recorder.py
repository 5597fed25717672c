"""The worker side's fail-open (monitoring/recorder.py), in-process on the
memory store with an injected fault and clock."""

from __future__ import annotations

import logging

import pytest
from dramatiq import Message
from dramatiq.broker import MessageProxy

from dramatiq_cron_middleware.monitoring.recorder import RunRecorder
from dramatiq_cron_middleware.store.in_memory import MemoryRuns, MemoryServer


def cron_message(second: int) -> MessageProxy:
    options = {"cron_tick": f"2030-01-01T00:00:{second:02d}+00:00", "cron_schedule": "report"}
    return MessageProxy(Message(queue_name="default", actor_name="report", args=(), kwargs={}, options=options))


def test_while_redis_fails_records_are_dropped_at_once_with_one_warning_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = MemoryServer(now_ms=lambda: 1_900_000_000_000)
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
        ("INFO", "Recording runs works again."),  # the episode's one WARNING was its start
    ]


def test_other_messages_are_not_recorded() -> None:
    server = MemoryServer(now_ms=lambda: 0)
    recorder = RunRecorder(runs_factory=lambda: MemoryRuns(server), logger=logging.getLogger("runs"))
    plain = MessageProxy(Message(queue_name="default", actor_name="job", args=(), kwargs={}, options={}))
    recorder.started(plain)
    recorder.processed(plain, None)
    recorder.settled(plain, rejected=False)
    assert server.run_events == []
