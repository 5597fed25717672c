"""Enqueueing granted ticks: one by one through ``broker.enqueue``, or, for
dramatiq's ``RedisBroker``, many in one pipelined round trip.

When a thousand schedules fall due in the same second, one broker round
trip per message dominates the fire lag (about 0.35 ms each on loopback).
dramatiq has no public batch enqueue, so for the stock ``RedisBroker`` this
module sends the broker's own dispatch script for every message through one
Redis pipeline, doing exactly what ``RedisBroker.enqueue`` does per message
(the same message copy, delay queue and ``eta``, the same ``before_enqueue``
and ``after_enqueue`` middleware hooks).  Any other broker, a subclass that
overrides ``enqueue``, or a dramatiq whose internals differ from the tested
ones, takes the plain path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import dramatiq
from dramatiq import Broker, Message

__all__ = ["enqueue_many"]

#: Below this many messages the plain path is as fast.
PIPELINE_FROM = 4


def enqueue_many(broker: Broker, items: Sequence[tuple[Message[Any], int | None]]) -> list[BaseException | None]:
    """Enqueue ``(message, delay)`` pairs; return, per item, None on success
    or the exception that made it fail (a failed item can be retried with the
    same message)."""
    if len(items) >= PIPELINE_FROM and _pipelinable(broker):
        try:
            return _pipelined(broker, items)
        except Exception as exc:  # the whole round trip failed
            return [exc] * len(items)
    out: list[BaseException | None] = []
    for message, delay in items:
        try:
            broker.enqueue(message, delay=delay)
        except Exception as exc:
            out.append(exc)
        else:
            out.append(None)
    return out


def _pipelinable(broker: Broker) -> bool:
    try:
        from dramatiq.brokers.redis import RedisBroker
    except ImportError:  # pragma: no cover - redis is a dependency
        return False
    return (
        isinstance(broker, RedisBroker)
        and type(broker).enqueue is RedisBroker.enqueue
        and dramatiq.__version__.split(".")[0] == "2"
        and "dispatch" in getattr(broker, "scripts", {})
        and all(hasattr(broker, name) for name in ("namespace", "broker_id", "heartbeat_timeout", "dead_message_ttl"))
        and callable(getattr(broker, "_should_do_maintenance", None))
        and callable(getattr(broker, "_max_unpack_size", None))
    )


def _pipelined(broker: Any, items: Sequence[tuple[Message[Any], int | None]]) -> list[BaseException | None]:
    from dramatiq.common import current_millis, dq_name

    dispatch = broker.scripts["dispatch"]
    pipe = broker.client.pipeline(transaction=False)
    sent: list[tuple[Message[Any], int | None]] = []
    out: list[BaseException | None] = [None] * len(items)
    positions: list[int] = []
    for index, (message, delay) in enumerate(items):
        # As RedisBroker.enqueue: a fresh Redis-side id per enqueue, and a
        # delayed message goes to the delay queue with its eta.
        queue_name = message.queue_name
        message = message.copy(options={"redis_message_id": str(uuid4())})
        if delay is not None:
            queue_name = dq_name(queue_name)
            message = message.copy(queue_name=queue_name, options={"eta": current_millis() + delay})
        try:
            broker.emit_before("enqueue", message, delay)
        except Exception as exc:  # a middleware vetoed this one message
            out[index] = exc
            continue
        dispatch(
            keys=[broker.namespace],
            args=[
                "enqueue",
                current_millis(),
                queue_name,
                broker.broker_id,
                broker.heartbeat_timeout,
                broker.dead_message_ttl,
                broker._should_do_maintenance("enqueue"),
                broker._max_unpack_size(),
                message.options["redis_message_id"],
                message.encode(),
            ],
            client=pipe,
        )
        sent.append((message, delay))
        positions.append(index)
    if not sent:
        return out
    replies = pipe.execute(raise_on_error=False)
    for index, (message, delay), reply in zip(positions, sent, replies, strict=True):
        if isinstance(reply, Exception):
            out[index] = reply
            continue
        broker.emit_after("enqueue", message, delay)
    return out
