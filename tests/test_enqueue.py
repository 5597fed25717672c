"""Granted ticks reach the broker together: for a RedisBroker, in one
pipelined round trip that real workers consume like any other message."""

from __future__ import annotations

import collections
import glob
import json
import os
from collections.abc import Callable

from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary, boundary_for
from dramatiq_cron_middleware.store.keys import Keys
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer


def runs(record_dir: str) -> list[dict[str, object]]:
    out = []
    for path in glob.glob(os.path.join(record_dir, "runs-*.jsonl")):
        with open(path) as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def test_ticks_due_together_are_pipelined_and_each_runs_once(
    app_env: dict[str, str], instances: Callable[..., Instance], history: History, record_dir: str
) -> None:
    """Given eight per-second schedules on a RedisBroker, when they fall due
    together (one pipelined enqueue per second), then every tick of every
    schedule is enqueued once and run once by a real worker."""
    with RedisServer() as broker_redis:
        instances({**app_env, "CRON_APP_BROKER": broker_redis.url, "CRON_APP_ACTORS": "8"}, threads=4)
        start = history.first_tick()
        # Four ticks inside the judged window (it starts after the first
        # tick a leader fired), so it holds at least two a schedule.
        wait_for(lambda: len([t for t in history.ticks("tick_7") if t > start]) >= 4, timeout=60, what="four ticks")
        end = now_ms() - 1500
        schedules = [f"tick_{i}" for i in range(8)]
        verdict = history.judge(schedules=schedules, start_ms=start, end_ms=end)
        assert verdict.expected >= 16
        assert not verdict.duplicates and not verdict.losses, verdict.summary()
        enqueued = {(e.actor, e.tick) for e in history.enqueues() if e.tick_ms <= end}

        def all_ran() -> bool:
            done = {(r["actor"], r["tick"]) for r in runs(record_dir)}
            return enqueued <= done

        wait_for(all_ran, timeout=20, what="every enqueued tick to run")
        counts = collections.Counter((r["actor"], r["tick"]) for r in runs(record_dir))
        assert all(counts[key] == 1 for key in enqueued), [k for k in enqueued if counts[k] != 1]


def boundary(broker: object, mode: Boundary) -> BrokerBoundary:
    return BrokerBoundary(broker, mode, keys=Keys("t"), mark_ms=60_000)  # type: ignore[arg-type]


def test_an_idempotent_batch_reports_each_message_and_honours_delays(redis_server: RedisServer) -> None:
    broker = RedisBroker(url=redis_server.url)
    broker.declare_queue("default")
    messages = [Message("default", "job", (n,), {}, {"cron_tick": str(n)}) for n in range(10)]
    send = boundary(broker, Boundary.IDEMPOTENT).send
    failures = send([(m, 5000 if n % 2 else None) for n, m in enumerate(messages)], now_ms=now_ms())
    assert failures == [None] * 10
    client = redis_server.client()
    assert client.llen("dramatiq:default") == 5
    assert client.llen("dramatiq:default.DQ") == 5
    broker.close()


def test_a_second_push_of_the_same_tick_is_a_no_op(redis_server: RedisServer) -> None:
    """Whether it comes from redis-py's retry of a timed-out call or from
    the scheduler's own retry of an owed tick, the same message sent again
    adds no queue entry: consumers cannot fetch it twice."""
    broker = RedisBroker(url=redis_server.url)
    broker.declare_queue("default")
    message = Message("default", "job", (), {}, {"cron_tick": "t"})
    send = boundary(broker, Boundary.IDEMPOTENT).send
    for _ in range(3):
        assert send([(message, None)], now_ms=now_ms()) == [None]
    client = redis_server.client()
    assert client.lrange("dramatiq:default", 0, -1) == [message.message_id]
    stored = json.loads(client.hget("dramatiq:default.msgs", message.message_id) or "{}")
    assert stored["message_id"] == message.message_id
    assert stored["options"]["redis_message_id"] == message.message_id
    broker.close()


def test_other_brokers_take_the_plain_path() -> None:
    broker = StubBroker()
    broker.declare_queue("default")
    messages = [Message("default", "job", (n,), {}, {}) for n in range(5)]
    assert boundary_for(broker, lease_client=None, same_server=True) == Boundary.PLAIN
    assert boundary(broker, Boundary.PLAIN).send([(m, None) for m in messages], now_ms=0) == [None] * 5
    assert broker.queues["default"].qsize() == 5


def test_a_failed_round_trip_fails_every_message_for_retry() -> None:
    broker = RedisBroker(url="redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    broker.declare_queue("default")
    messages = [Message("default", "job", (n,), {}, {}) for n in range(5)]
    failures = boundary(broker, Boundary.IDEMPOTENT).send([(m, None) for m in messages], now_ms=0)
    assert len(failures) == 5 and all(f is not None for f in failures)
