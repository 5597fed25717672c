"""A stopping consumer's prefetched messages go back on their queue.

dramatiq's ``Worker.stop`` requeues the messages in its work queue, but a
Redis consumer's last fetch (up to ``prefetch`` messages, of which the
consumer thread hands out one before it sees the stop) stays in the
consumer's cache, claimed in the stopping process's ack set, until the
heartbeat timeout (60 s) lets another worker's maintenance requeue it.  A
tick fired in a rolling restart then ran a minute late, or not at all
under a ``max_age`` below that.  The middleware's
``before_consumer_thread_shutdown`` hook, which the consumer thread emits
after its loop, requeues that cache.  Other brokers keep no such cache
(RabbitMQ returns unacknowledged deliveries when the channel closes).
"""

from __future__ import annotations

import logging
from typing import Any

from dramatiq import Message
from dramatiq.broker import MessageProxy
from dramatiq.errors import DecodeError

from .store.connection import redact

__all__ = ["requeue_prefetched"]


def requeue_prefetched(thread: Any, logger: logging.Logger) -> int:
    """Put the messages ``thread``'s consumer fetched and never handed out
    back on their queue; how many.  Called on the consumer thread after its
    loop ended, so nothing consumes the cache meanwhile.  A Redis that
    fails leaves them to the heartbeat timeout, with one WARNING."""
    consumer = getattr(thread, "consumer", None)
    cache = getattr(consumer, "message_cache", None)
    if consumer is None or not isinstance(cache, list) or not cache:
        return 0
    messages = []
    for data in cache:
        try:
            messages.append(MessageProxy(Message.decode(data)))
        except (DecodeError, TypeError):  # dramatiq's cache may hold a None (its issue 266)
            continue
    cache.clear()
    try:
        consumer.requeue(messages)
    except Exception as exc:  # the broker's Redis is down: its heartbeat timeout requeues them
        logger.warning(
            "%d prefetched messages of queue %s could not be put back at shutdown (%s); they wait for the "
            "broker's heartbeat timeout.",
            len(messages),
            getattr(thread, "queue_name", "?"),
            redact(f"{type(exc).__name__}: {exc}"),
        )
        return 0
    return len(messages)
