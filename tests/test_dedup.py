"""Worker-side deduplication (``CronDeduplication``): each attempt of a cron
message runs once however often the broker delivers it, against a real
redis-server and real dramatiq workers."""

from __future__ import annotations

import collections
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Message, Worker
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage

from dramatiq_cron_middleware import CronConfigurationError, CronDeduplication, CronMiddleware, Schedule
from dramatiq_cron_middleware.dedup import DEFAULT_QUEUE_WAIT
from dramatiq_cron_middleware.testing import running_worker
from tests.support.instances import Instance, wait_for
from tests.support.redis_server import RedisServer, free_port

DEDUP_LOGGER = "dramatiq_cron_middleware.dedup.CronDeduplication"
TICK = "2030-01-01T00:00:00+00:00"


def cron_message(actor: str = "job", *, manual: bool = False, **options: Any) -> Message[Any]:
    """A message as the scheduler sends it: ``cron_tick`` and
    ``cron_schedule`` set, a random id (ticks have a deterministic one;
    the middleware only needs it to be shared by the copies)."""
    opts: dict[str, Any] = {"cron_tick": TICK, "cron_schedule": f"{actor}", **options}
    if manual:
        opts["cron_manual"] = True
    return Message(
        queue_name="default", actor_name=actor, args=(), kwargs={}, options=opts, message_id=str(uuid.uuid4())
    )


class App:
    """A StubBroker with CronMiddleware + CronDeduplication, a recording
    actor ``job`` and a real dramatiq Worker on two threads."""

    def __init__(self, redis_url: str, *, fail_first: bool = False, gate: threading.Event | None = None, **kw: Any):
        self.broker = StubBroker()
        self.cron = CronMiddleware(redis=redis_url)
        self.dedup = CronDeduplication(**kw)
        self.broker.add_middleware(self.cron)
        self.broker.add_middleware(self.dedup)
        self.broker.add_middleware(CurrentMessage())
        self.runs: list[tuple[str, int]] = []
        self._lock = threading.Lock()

        def job() -> None:
            message = CurrentMessage.get_current_message()
            assert message is not None
            attempt = int(message.options.get("retries", 0))
            with self._lock:
                self.runs.append((message.message_id, attempt))
            if gate is not None:
                assert gate.wait(10)
            if fail_first and attempt == 0:
                raise RuntimeError("the first attempt fails")

        dramatiq.actor(job, actor_name="job", broker=self.broker, max_retries=1, min_backoff=10, max_backoff=20)
        self._running = running_worker(self.broker, worker_threads=2, worker_timeout=50)

    def __enter__(self) -> App:
        self.worker = self._running.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._running.__exit__(*exc)

    def deliver(self, message: Message[Any], times: int = 2) -> None:
        """The broker delivers ``message`` ``times`` times (the same body)."""
        for _ in range(times):
            self.broker.enqueue(message)

    def settle(self) -> None:
        self.broker.join("default", timeout=10_000)
        self.worker.join()

    def count(self, message: Message[Any]) -> collections.Counter[int]:
        """Runs of ``message`` by attempt."""
        with self._lock:
            return collections.Counter(a for m, a in self.runs if m == message.message_id)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="dramatiq")
    caplog.set_level(logging.DEBUG, logger="dramatiq_cron_middleware")  # last: sets the handler's level
    return caplog


def dedup_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == DEDUP_LOGGER and r.levelno == level]


# -- one worker, in process ---------------------------------------------------


def test_a_cron_message_delivered_twice_runs_once(redis_server: RedisServer, logs: pytest.LogCaptureFixture) -> None:
    with App(redis_server.url) as app:
        first, second = cron_message(), cron_message()
        app.deliver(first)
        app.deliver(second, times=3)
        app.settle()
    assert app.count(first) == {0: 1}
    assert app.count(second) == {0: 1}
    # Quiet: one INFO for the process's first duplicate, DEBUG after that,
    # and not dramatiq's WARNING per skipped message.
    assert len(dedup_records(logs, logging.INFO)) == 1
    assert len(dedup_records(logs, logging.DEBUG)) == 2
    assert not [r for r in logs.records if r.levelno >= logging.WARNING], logs.text


def test_a_plain_message_delivered_twice_runs_twice(redis_server: RedisServer) -> None:
    with App(redis_server.url) as app:
        message = Message(queue_name="default", actor_name="job", args=(), kwargs={}, options={})
        app.deliver(message)
        app.settle()
    assert app.count(message) == {0: 2}
    assert redis_server.client().keys(app.cron.keys.dedup("*")) == []  # not even a round trip


def test_a_manual_trigger_delivered_twice_runs_once(redis_server: RedisServer) -> None:
    with App(redis_server.url) as app:
        message = cron_message(manual=True)
        app.deliver(message)
        app.settle()
    assert app.count(message) == {0: 1}


def test_a_retry_runs_and_duplicates_of_each_attempt_do_not(redis_server: RedisServer) -> None:
    # Given a cron message whose first attempt fails, delivered twice
    with App(redis_server.url, fail_first=True) as app:
        message = cron_message()
        app.deliver(message)
        # Then the first attempt and its retry by Retries run, once each
        wait_for(lambda: app.count(message) == {0: 1, 1: 1}, timeout=60, what="the attempt and its retry")
        app.settle()
        # And late duplicates of either attempt do not run
        for attempt in (0, 1):
            app.deliver(message.copy(options={**message.options, "retries": attempt}))
        app.settle()
    assert app.count(message) == {0: 1, 1: 1}
    mark = redis_server.client().get(app.cron.keys.dedup(message.message_id))
    assert mark is not None and mark.startswith("1|")


def test_a_resent_claim_whose_reply_was_lost_still_runs(redis_server: RedisServer) -> None:
    # redis-py resends a command that timed out; the first one may have
    # run.  The claimer must recognise its own mark, not skip its message.
    app = App(redis_server.url)
    marks = app.dedup._marks_of(app.broker)
    key = app.cron.keys.dedup("m1")

    def claims(attempt: int, token: str) -> bool:
        return marks.claim("m1", attempt, token=token)

    assert claims(0, "token-a")
    assert claims(0, "token-a")  # the resend
    assert not claims(0, "token-b")  # a duplicate
    assert claims(1, "token-c")  # the retry
    assert not claims(0, "token-a")  # the old attempt, again
    redis_server.client().set(key, "garbage")
    assert claims(0, "token-d")  # a bad mark is taken for missing


def test_a_skipped_duplicate_keeps_the_overlap_mark_of_the_running_copy(
    redis_server: RedisServer, logs: pytest.LogCaptureFixture
) -> None:
    # Given an overlap="skip" message running, its running mark set by the claim
    gate = threading.Event()
    with App(redis_server.url, gate=gate) as app:
        message = cron_message(cron_overlap="skip")
        client = redis_server.client()
        running = app.cron.keys.running(message.options["cron_schedule"])
        client.set(running, message.message_id, px=60_000)
        app.deliver(message, times=1)
        wait_for(lambda: app.count(message), timeout=60, what="the first copy to start")
        # When its duplicate is delivered and skipped
        app.deliver(message, times=1)
        wait_for(lambda: dedup_records(logs, logging.INFO), timeout=60, what="the duplicate's skip")
        # Then the mark still names the running copy
        assert client.get(running) == message.message_id
        gate.set()
        app.settle()
    assert app.count(message) == {0: 1}
    assert client.get(running) is None  # cleared by the copy that ran


# -- time to live -------------------------------------------------------------


def test_the_ttl_covers_the_catch_up_window_and_the_queue_wait(redis_server: RedisServer) -> None:
    broker = StubBroker()
    cron = CronMiddleware(redis=redis_server.url, catch_up_window=120_000)
    dedup = CronDeduplication()
    broker.add_middleware(cron)
    broker.add_middleware(dedup)
    assert dedup.effective_ttl(broker) == 120_000 + DEFAULT_QUEUE_WAIT  # no schedules yet
    dramatiq.actor(lambda: None, actor_name="bounded", broker=broker, cron=Schedule("* * * * *", max_age=60_000))
    assert dedup.effective_ttl(broker) == 120_000 + 60_000
    window = Schedule("* * * * *", catch_up_window=600_000, max_age=30_000)
    dramatiq.actor(lambda: None, actor_name="wide", broker=broker, cron=window)
    assert dedup.effective_ttl(broker) == 600_000 + 30_000
    dramatiq.actor(lambda: None, actor_name="unbounded", broker=broker, cron="* * * * *")
    assert dedup.effective_ttl(broker) == 120_000 + DEFAULT_QUEUE_WAIT


def test_a_ttl_override_sets_the_mark_expiry(redis_server: RedisServer) -> None:
    with App(redis_server.url, ttl=5_000) as app:
        message = cron_message()
        app.deliver(message, times=1)
        app.settle()
    assert 4_000 < redis_server.client().pttl(app.cron.keys.dedup(message.message_id)) <= 5_000
    for bad in (999, 1.5, True, "5000"):
        with pytest.raises(CronConfigurationError, match="ttl"):
            CronDeduplication(ttl=bad)  # type: ignore[arg-type]


def test_without_a_cron_middleware_the_worker_does_not_boot() -> None:
    broker = StubBroker()
    broker.add_middleware(CronDeduplication())
    with pytest.raises(CronConfigurationError, match="needs a CronMiddleware"):
        with running_worker(broker, worker_timeout=50):
            pass


def test_a_stopped_worker_leaves_no_redis_connection_open(redis_server: RedisServer) -> None:
    """Given a worker that ran deduplicated cron messages, when it stops,
    then neither middleware keeps a connection to Redis open (each kept
    its pools' connections for the life of the process)."""
    admin = redis_server.client()
    before = len(admin.client_list())
    with App(redis_server.url) as app:
        message = cron_message()
        app.deliver(message)
        app.settle()
        assert len(admin.client_list()) > before
    assert app.count(message) == {0: 1}
    # A closed connection leaves the server's list once the server has read
    # the close (Redis 6.2 shows it a moment longer): wait for that.
    wait_for(
        lambda: len(admin.client_list()) == before,
        timeout=30,
        what="the worker's connections to close",
    )


# -- Redis unreachable ----------------------------------------------------------


def test_redis_unreachable_runs_messages_unchecked_with_one_warning(logs: pytest.LogCaptureFixture) -> None:
    # Given the marks' Redis is down (nothing listens on its port)
    port = free_port()
    with App(f"redis://127.0.0.1:{port}/0") as app:
        # When cron messages are delivered twice
        down = [cron_message() for _ in range(3)]
        for message in down:
            app.deliver(message)
        app.settle()
        # Then every copy runs (fail open), with one WARNING and no traceback
        assert [app.count(m) for m in down] == [{0: 2}] * 3
        warnings = dedup_records(logs, logging.WARNING)
        assert len(warnings) == 1 and "running them unchecked" in warnings[0], warnings
        assert not [r for r in logs.records if r.exc_info], logs.text
        # And when Redis is back, deduplication resumes, with one WARNING
        with RedisServer(port=port):
            back = cron_message()
            app.deliver(back)
            app.settle()
            assert app.count(back) == {0: 1}
    warnings = dedup_records(logs, logging.WARNING)
    assert warnings[1:] == ["Cron deduplication works again."], warnings


# -- real dramatiq processes on RabbitMQ ---------------------------------------


def _consumers(url: str, queue: str) -> int:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.consumer_count)
    except pika.exceptions.ChannelClosedByBroker:  # not declared yet
        return 0
    finally:
        if connection.is_open:
            connection.close()


def _runs(record_dir: str) -> list[dict[str, Any]]:
    return [json.loads(line) for p in Path(record_dir).glob("runs-*.jsonl") for line in p.read_text().splitlines()]


def test_two_worker_processes_run_a_message_rabbitmq_delivers_twice_once(
    rabbitmq: Any,
    redis_server: RedisServer,
    record_dir: str,
    instances: Callable[..., Instance],
) -> None:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    # Given two dramatiq worker processes consuming one RabbitMQ queue
    env = {"DRAMATIQ_CRON_REDIS_URL": redis_server.url, "CRON_APP_BROKER": rabbitmq.url, "CRON_APP_RECORD": record_dir}
    instance = instances(env, processes=2, threads=1, app="tests.apps.dedupapp")
    wait_for(lambda: _consumers(rabbitmq.url, "default") == 2, timeout=30, interval=0.1, what="two consumers")
    # When the queue holds the same cron message twice (a publish retried
    # after a lost confirm)
    publisher = RabbitmqBroker(url=rabbitmq.url)
    try:
        message = cron_message()
        publisher.enqueue(message)
        publisher.enqueue(message)
    finally:
        publisher.close()
    skipped = re.compile(r"\[PID (\d+)\].*Skipped a duplicate delivery of cron message " + message.message_id)
    wait_for(lambda: skipped.search(instance.log()), timeout=30, what=f"the duplicate's skip ({instance.log_path})")
    wait_for(lambda: _runs(record_dir), timeout=60, what="the run")

    # Then the actor ran once, in one process, and the other process skipped the copy it got
    runs = _runs(record_dir)
    assert [r["message_id"] for r in runs] == [message.message_id], runs
    match = skipped.search(instance.log())
    assert match is not None and int(match.group(1)) != runs[0]["pid"], instance.log()
    log = instance.log()
    assert "Traceback" not in log and "was skipped" not in log, log
    assert instance.terminate() == 0
    assert len(_runs(record_dir)) == 1


def test_two_worker_processes_run_a_message_pushed_twice_on_a_redis_broker_once(
    redis_server: RedisServer, record_dir: str, instances: Callable[..., Instance]
) -> None:
    from dramatiq.brokers.redis import RedisBroker

    # Given two worker processes on a RedisBroker, the marks on its Redis
    # (no DRAMATIQ_CRON_REDIS_URL: the broker's client is the source)
    env = {
        "DRAMATIQ_CRON_REDIS_URL": "",  # empty means unset
        "CRON_APP_BROKER": redis_server.url,
        "CRON_APP_RECORD": record_dir,
        "DEDUP_APP_RUN_MS": "200",
    }
    instance = instances(env, processes=2, threads=1, app="tests.apps.dedupapp")
    # When one message is pushed twice, under two redis message ids (what
    # the scheduler's retry of an enqueue whose reply was lost leaves)
    publisher = RedisBroker(url=redis_server.url)
    try:
        message = cron_message()
        publisher.enqueue(message)
        publisher.enqueue(message)
    finally:
        publisher.close()
    skipped = "Skipped a duplicate delivery of cron message " + message.message_id
    wait_for(lambda: skipped in instance.log(), timeout=30, what=f"the duplicate's skip ({instance.log_path})")
    wait_for(lambda: _runs(record_dir), timeout=60, what="the run")
    # Then the actor ran once
    assert [r["message_id"] for r in _runs(record_dir)] == [message.message_id]
    assert redis_server.client().exists(f"{{dramatiq-cron}}:dedup:{message.message_id}")
    assert "Traceback" not in instance.log() and "was skipped" not in instance.log(), instance.log()
    assert instance.terminate() == 0
    assert len(_runs(record_dir)) == 1


def test_more_worker_threads_than_the_scheduler_pool_wait_for_a_connection_instead_of_failing_open(
    redis_server: RedisServer, logs: pytest.LogCaptureFixture
) -> None:
    # Given a worker with 16 threads (the scheduler's plain pools hold 8
    # connections) and Redis paused, so that every claim holds its
    # connection at once
    app = App(redis_server.url)
    app.dedup.before_worker_boot(app.broker, Worker(app.broker, worker_threads=16))
    app.dedup._marks_of(app.broker)
    messages = [MessageProxy(cron_message()) for _ in range(16)]
    start = threading.Barrier(17)
    claimed: list[str] = []

    def claim(message: MessageProxy) -> None:
        start.wait()
        app.dedup.before_process_message(app.broker, message)
        claimed.append(message.message_id)

    threads = [threading.Thread(target=claim, args=(m,)) for m in messages]
    for thread in threads:
        thread.start()
    redis_server.client().execute_command("CLIENT", "PAUSE", "300")
    start.wait()
    for thread in threads:
        thread.join(10)
    # Then every claim went through: no fail-open, every mark written
    assert len(claimed) == 16
    assert not dedup_records(logs, logging.WARNING), logs.text
    assert all(redis_server.client().exists(app.cron.keys.dedup(m.message_id)) for m in messages)
