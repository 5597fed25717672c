"""A worker's graceful stop puts every message it fetched back on its queue
at once, the ones its Redis consumer prefetched but never handed out
included.  dramatiq's ``Worker.stop`` requeues its work queue only: the
last fetch of a stopping consumer (a batch of up to ``prefetch`` messages,
one handed out before it sees the stop) left the rest in the process's ack
set until the heartbeat timeout (60 s) let another worker requeue them, so
a tick fired during a rolling restart ran a minute late and was lost to a
``max_age`` under that.  Real dramatiq consumer thread on a real
redis-server."""

from __future__ import annotations

import queue
from typing import Any

import dramatiq
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker
from dramatiq.worker import ConsumerThread

from dramatiq_cron_middleware import CronMiddleware
from tests.support.redis_server import RedisServer


class StopsAtFirstPut(queue.PriorityQueue[Any]):
    """A work queue that tells its consumer thread to stop as the first
    message arrives: the stop a worker sends while the consumer's last
    fetch is still in its cache."""

    thread: ConsumerThread

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self.thread.stop()


def test_a_stopping_consumer_puts_back_what_it_prefetched_and_never_handed_out(redis_server: RedisServer) -> None:
    """Given five messages on a queue and a consumer thread that fetches
    them in one batch, When the worker stops it after it handed out the
    first, and requeues its work queue as ``Worker.stop`` does, Then all
    five are back on the queue and none waits in the stopped process's ack
    set."""
    broker = RedisBroker(url=redis_server.url)
    broker.add_middleware(CronMiddleware(redis=redis_server.url))

    @dramatiq.actor(broker=broker)
    def job(n: int) -> None: ...

    sent = {job.send(n).message_id for n in range(5)}
    work: StopsAtFirstPut = StopsAtFirstPut()
    thread = work.thread = ConsumerThread(
        broker=broker, queue_name="default", prefetch=5, work_queue=work, worker_timeout=100
    )
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    handed_out = [work.get_nowait().message]
    assert work.empty()
    thread.requeue_messages(handed_out)  # what Worker.stop does with its work queue
    thread.close()

    client = redis_server.client()
    queued = client.lrange("dramatiq:default", 0, -1)
    bodies = client.hmget("dramatiq:default.msgs", queued) if queued else []
    back = {Message.decode(body.encode()).message_id for body in bodies if body is not None}
    acks = client.smembers(f"dramatiq:__acks__.{broker.broker_id}.default")
    assert (len(queued), back, acks) == (5, sent, set())
    broker.close()
