"""The worker side of run monitoring (monitoring/recorder.py): one recorder
whose sinks are each told every run on a thread of their own, and the
store's sink failing open; in-process on the memory store with an injected
fault and clock."""

from __future__ import annotations

import logging
import threading

import pytest
from dramatiq import Message
from dramatiq.broker import MessageProxy

from dramatiq_cron_middleware.monitoring.recorder import RECORD_TIMEOUT_MS, Run, RunRecorder, StoreSink
from dramatiq_cron_middleware.store.in_memory import MemoryRuns, MemoryServer
from dramatiq_cron_middleware.store.runs import ALIVE_MS
from tests.support.faults import FaultyServer
from tests.support.instances import wait_for


def cron_message(second: int) -> MessageProxy:
    options = {"cron_tick": f"2030-01-01T00:00:{second:02d}+00:00", "cron_schedule": "report"}
    return MessageProxy(Message(queue_name="default", actor_name="report", args=(), kwargs={}, options=options))


def run_once(recorder: RunRecorder, message: MessageProxy, error: BaseException | None = None) -> None:
    """What the middleware's hooks tell the recorder of one attempt that ran."""
    recorder.started(message)
    recorder.processed(message, error)
    recorder.settled(message, rejected=False)


class Sink:
    """A sink that keeps what it is told; ``hold`` makes it block at its
    first event until set, ``fail`` makes it raise at every event."""

    def __init__(self, name: str, *, hold: threading.Event | None = None, fail: bool = False) -> None:
        self.name = name
        self.hold = hold
        self.fail = fail
        self.told: list[tuple[str, str, str]] = []

    def started(self, run: Run) -> None:
        self._event("started", run)

    def finished(self, run: Run) -> None:
        self._event("finished", run)

    def _event(self, event: str, run: Run) -> None:
        if self.hold is not None:
            self.hold.wait(60)
        if self.fail:
            raise RuntimeError("this sink is broken")
        self.told.append((event, run.message_id, run.outcome))


def test_a_sink_that_blocks_or_raises_neither_delays_nor_loses_the_other_sinks_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Given three sinks of one recorder, one blocked in its first event and
    one raising at every event, When three runs are recorded, Then the
    hooks return at once, the working sink is told all six events while
    the blocked one still blocks, the raising one is reported once (not
    per event), and the blocked one, released, is told every event too."""
    hold = threading.Event()
    blocked, broken, working = Sink("blocked", hold=hold), Sink("broken", fail=True), Sink("working")
    recorder = RunRecorder(logger=logging.getLogger("runs"), sinks=[blocked, broken, working])
    messages = [cron_message(second) for second in (1, 2, 3)]
    with caplog.at_level(logging.INFO, logger="runs"):
        for message in messages:
            run_once(recorder, message)  # would hang here if a hook waited on the blocked sink
        wait_for(lambda: len(working.told) == 6, timeout=30, what="the working sink's six events")
        assert blocked.told == []  # still blocked: it held back nobody
        expected = [(e, m.message_id, o) for m in messages for e, o in (("started", ""), ("finished", "succeeded"))]
        assert working.told == expected
        hold.set()
        assert recorder.flush(30)
    assert blocked.told == expected
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "Cron run broken raised (RuntimeError: this sink is broken); the other sinks and the jobs go on."
    ]
    assert recorder.lost == 0
    recorder.close()


def test_each_attempt_is_told_once_with_its_outcome_and_a_skipped_message_as_dropped() -> None:
    """A failed attempt acknowledged is ``retrying``, rejected ``failed``;
    a message skipped before it started is ``dropped``, without a start;
    the same sink added twice is told once."""
    sink = Sink("sink")
    recorder = RunRecorder(logger=logging.getLogger("runs"), sinks=[sink])
    recorder.add(sink)
    first, second, skipped = cron_message(1), cron_message(2), cron_message(3)
    run_once(recorder, first, RuntimeError("boom"))
    recorder.started(second)
    recorder.processed(second, RuntimeError("boom"))
    recorder.settled(second, rejected=True)
    recorder.dropped(skipped)
    assert recorder.flush(30)
    assert [(event, outcome) for event, _, outcome in sink.told] == [
        ("started", ""),
        ("finished", "retrying"),
        ("started", ""),
        ("finished", "failed"),
        ("finished", "dropped"),
    ]
    recorder.close()


def test_while_redis_fails_records_are_dropped_at_once_with_one_warning_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FaultyServer(now_ms=lambda: 1_900_000_000_000)
    runs = MemoryRuns(server)
    clock = [100.0]
    sink = StoreSink(store=lambda: runs, logger=logging.getLogger("runs"), retry_after=1.0, monotonic=lambda: clock[0])
    recorder = RunRecorder(logger=logging.getLogger("runs"), sinks=[sink])
    server.refuse("record_run", times=1)
    with caplog.at_level(logging.INFO, logger="runs"):
        recorder.started(cron_message(1))  # refused: the episode starts
        assert recorder.flush(30)
        clock[0] += 0.5
        recorder.started(cron_message(2))  # within a second: dropped without trying (Redis is back)
        assert recorder.flush(30)
        clock[0] += 0.6
        recorder.started(cron_message(3))
        assert recorder.flush(30)
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
    runs = MemoryRuns(server)
    recorder = RunRecorder(
        logger=logging.getLogger("runs"), sinks=[StoreSink(store=lambda: runs, logger=logging.getLogger("runs"))]
    )
    plain = MessageProxy(Message(queue_name="default", actor_name="job", args=(), kwargs={}, options={}))
    run_once(recorder, plain)
    recorder.dropped(plain)
    assert recorder.flush(30)
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
    sink = StoreSink(store=lambda: runs, logger=logging.getLogger("runs"), beat=0.01)
    recorder = RunRecorder(logger=logging.getLogger("runs"), sinks=[sink])
    message = cron_message(1)
    member = "r|1893456001000|report"
    recorder.started(message)
    assert recorder.flush(30)
    assert server.runs_alive == {member: now[0] + ALIVE_MS}
    now[0] += 5_000
    wait_for(lambda: server.runs_alive.get(member) == now[0] + ALIVE_MS, timeout=30, what="a heartbeat")
    recorder.processed(message, None)
    recorder.settled(message, rejected=False)
    assert recorder.flush(30)
    assert member not in server.runs_alive
    wait_for(lambda: not heartbeats(), timeout=30, what="the heartbeat thread's end")
    recorder.close()
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("cron-runs-")],
        timeout=30,
        what="the sinks' threads' end once closed",
    )


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
    (sink,) = cron.run_recorder(broker).sinks
    assert isinstance(sink, StoreSink)
    store = sink.store()
    timeout = store.client.connection_pool.connection_kwargs["socket_timeout"]  # type: ignore[union-attr]
    assert timeout * 1000 >= RECORD_TIMEOUT_MS
    cron.stop()


def test_a_retry_that_starts_before_its_failed_attempt_is_acknowledged_is_told_after_that_attempts_finish() -> None:
    """Given an attempt that failed, When ``Retries`` has enqueued its retry
    and another worker thread starts that retry before the first thread
    acknowledges the failed attempt (``Retries`` enqueues in
    ``after_process_message``, the ack comes later), Then every sink is
    told the failed attempt's finish (``retrying``) before the retry's
    start, the late ack tells nothing more, and the retry's own finish
    comes last: a monitor that shows the last event shows the recovery."""
    told: list[tuple[str, int, str]] = []

    class Attempts(Sink):
        def _event(self, event: str, run: Run) -> None:
            told.append((event, run.attempt, run.outcome))

    recorder = RunRecorder(logger=logging.getLogger("runs"), sinks=[Attempts("sink")])
    first = cron_message(1)
    recorder.started(first)
    recorder.processed(first, RuntimeError("first attempt fails"))
    first.options["retries"] = 1  # what Retries does before it enqueues the retry
    retry = MessageProxy(first._message.copy())

    def the_retry_on_another_thread() -> None:
        run_once(recorder, retry)

    other = threading.Thread(target=the_retry_on_another_thread)
    other.start()
    other.join(30)
    recorder.settled(first, rejected=False)  # the failed attempt's ack, late
    assert recorder.flush(30)
    assert told == [("started", 1, ""), ("finished", 1, "retrying"), ("started", 2, ""), ("finished", 2, "succeeded")]
    recorder.close()
