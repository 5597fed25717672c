"""The broker boundary: how granted ticks reach the broker, and how often.

Three ways, chosen once per process by :func:`boundary_for`:

- **In the claim** (a stock ``RedisBroker`` whose Redis also holds the
  lease, the default): the claim script itself writes each granted message
  into dramatiq's queue layout, in the same atomic step that records the
  tick as fired.  A tick is recorded as fired if and only if its message is
  in the queue; a retried script (its batch record) never pushes twice.
- **Idempotent** (a stock ``RedisBroker`` on another Redis): a small script
  on the broker's Redis pushes a message only if the tick's enqueue mark is
  not there yet, so a retry (redis-py's after a timeout, or ours of an owed
  tick) is a no-op.  Many messages go in one pipelined round trip.
- **Plain** (any other broker: RabbitMQ, SQS, Postgres...): one
  ``broker.enqueue`` per message.  At-least-once at this boundary, with the
  deterministic message id; ``CronDeduplication`` on the workers turns that
  into one run per tick.

In every mode the broker's middleware sees ``before_enqueue`` before the
message leaves and ``after_enqueue`` after it arrived, as with
``broker.enqueue``; the Redis-side modes store the message under a
deterministic redis message id (the message id), in the exact layout
``RedisBroker`` uses, so dramatiq's consumers, dead-lettering and
dashboards see ordinary messages.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Sequence
from typing import Any

import dramatiq
import redis
from dramatiq import Broker, Message, Middleware
from dramatiq.middleware import MiddlewareError

from .codes import load_script
from .keys import Keys

__all__ = ["Boundary", "BrokerBoundary", "Payload", "boundary_for", "enqueue_many"]

#: Message bodies kept as templates (one per schedule and shape), at most.
TEMPLATES = 20_000


class Boundary(str, enum.Enum):
    """How granted ticks reach the broker."""

    IN_CLAIM = "in_claim"
    IDEMPOTENT = "idempotent"
    PLAIN = "plain"


@dataclasses.dataclass(frozen=True)
class Payload:
    """A message encoded for dramatiq's Redis layout."""

    #: The message as enqueued (with its redis message id, and for a
    #: delayed message its delay queue and eta), for the hooks.
    message: Message[Any]
    delay: int | None
    queue_key: str
    messages_key: str
    redis_message_id: str
    body: str


class BrokerBoundary:
    """Enqueues granted ticks in one of the three ways (see the module).

    Parameters:
      broker: The broker.
      mode: How (from :func:`boundary_for`).
      keys: The scheduler's keys (enqueue marks live under its prefix).
      mark_ms: How long an enqueue mark is kept (idempotent mode): at least
        the longest catch-up window, so no retry outlives it.
    """

    def __init__(self, broker: Broker, mode: Boundary, *, keys: Keys, mark_ms: int) -> None:
        self.broker = broker
        self.mode = mode
        self.keys = keys
        self.mark_ms = mark_ms
        self._client: redis.Redis | None = getattr(broker, "client", None) if mode != Boundary.PLAIN else None
        self._enqueue_script = load_script(self._client, "enqueue") if self._client is not None else None
        #: Per template key (see :meth:`payload`): the schedule the body
        #: was made for and the body cut at its per-tick values, or None
        #: when the body does not split cleanly (then encoded each time).
        self._templates: dict[tuple[str, bool], tuple[object, _Template | None]] = {}

    def payload(
        self, message: Message[Any], delay: int | None, *, now_ms: int, template: tuple[str, object] | None = None
    ) -> Payload:
        """Encode a message as ``RedisBroker.enqueue`` would, with the
        message id as its redis message id.

        ``template`` names the schedule the message belongs to (its id and
        its bound schedule object): the messages of one schedule differ only
        in their id, tick, timestamp and eta, so its body is encoded in full
        once, checked against a second full encoding, and from then on
        filled in (same bytes, a fraction of the cost)."""
        from dramatiq.common import dq_name

        queue_name = message.queue_name
        options = {**message.options, "redis_message_id": message.message_id}
        if delay:
            queue_name = dq_name(queue_name)
            options["eta"] = now_ms + delay
        # One construction (``Message.copy`` twice costs two dataclass replaces).
        message = Message(
            queue_name=queue_name,
            actor_name=message.actor_name,
            args=message.args,
            kwargs=message.kwargs,
            options=options,
            message_id=message.message_id,
            message_timestamp=message.message_timestamp,
        )
        namespace = self.broker.namespace  # type: ignore[attr-defined]
        return Payload(
            message=message,
            delay=delay or None,
            queue_key=f"{namespace}:{queue_name}",
            messages_key=f"{namespace}:{queue_name}.msgs",
            redis_message_id=message.message_id,
            body=self._body(message, template, bool(delay)),
        )

    def _body(self, message: Message[Any], template: tuple[str, object] | None, delayed: bool) -> str:
        if template is None or dramatiq.get_encoder().__class__ is not dramatiq.JSONEncoder:
            return message.encode().decode("utf-8")
        key = (template[0], delayed)
        cached = self._templates.get(key)
        if cached is not None and cached[0] is template[1]:
            cut = cached[1]
            if cut is None:
                return message.encode().decode("utf-8")
            body = cut.fill(message)
            if not cut.checked:  # the first fill is checked against a full encoding
                full = message.encode().decode("utf-8")
                if full != body:
                    self._templates[key] = (template[1], None)
                    return full
                cut.checked = True
            return body
        body = message.encode().decode("utf-8")
        if len(self._templates) >= TEMPLATES:
            self._templates.clear()
        self._templates[key] = (template[1], _Template.cut(message, body))
        return body

    def before(self, payload: Payload) -> BaseException | None:
        """Run the broker's ``before_enqueue`` hooks; the exception of a
        middleware that vetoed the message, or None."""
        try:
            self.broker.emit_before("enqueue", payload.message, payload.delay)
        except Exception as exc:
            return exc
        return None

    def before_many(self, payloads: Sequence[Payload | None]) -> list[Payload | None]:
        """:meth:`before` for each payload: the payloads no middleware
        vetoed, None for the others.  Only the middleware that define a
        ``before_enqueue`` are called (the others' is a no-op), with
        ``Broker.emit_before``'s handling of their exceptions."""
        hooks = _hooks(self.broker, "before_enqueue")
        if not hooks:
            return list(payloads)
        broker, log = self.broker, self.broker.logger
        out: list[Payload | None] = []
        for payload in payloads:
            if payload is None:
                out.append(None)
                continue
            try:
                for middleware, hook in hooks:
                    try:
                        hook(broker, payload.message, payload.delay)
                    except MiddlewareError:
                        raise
                    except Exception:
                        log.critical("Unexpected failure in before_enqueue of %r.", middleware, exc_info=True)
            except Exception:
                out.append(None)
                continue
            out.append(payload)
        return out

    def after(self, payload: Payload) -> None:
        """Run the broker's ``after_enqueue`` hooks for a message that is in
        the queue."""
        self.broker.emit_after("enqueue", payload.message, payload.delay)

    def after_many(self, payloads: Sequence[Payload]) -> None:
        """:meth:`after` for each payload, calling only the middleware that
        define an ``after_enqueue`` (in ``Broker.emit_after``'s order, with
        its handling of their exceptions)."""
        hooks = _hooks(self.broker, "after_enqueue")[::-1]
        broker, log = self.broker, self.broker.logger
        for payload in payloads:
            for middleware, hook in hooks:
                try:
                    hook(broker, payload.message, payload.delay)
                except Exception:
                    log.critical("Unexpected failure in after_enqueue of %r.", middleware, exc_info=True)

    def send(self, items: Sequence[tuple[Message[Any], int | None]], *, now_ms: int) -> list[BaseException | None]:
        """Enqueue ``(message, delay)`` pairs outside a claim; per item None
        on success or the exception that made it fail (a failed item can be
        retried with the same message: in the Redis modes a retry that finds
        the message enqueued is a no-op)."""
        if self.mode == Boundary.PLAIN or self._client is None or self._enqueue_script is None:
            return enqueue_many(self.broker, items)
        out: list[BaseException | None] = [None] * len(items)
        payloads: list[tuple[int, Payload]] = []
        for index, (message, delay) in enumerate(items):
            payload = self.payload(message, delay, now_ms=now_ms)
            vetoed = self.before(payload)
            if vetoed is not None:
                out[index] = vetoed
                continue
            payloads.append((index, payload))
        if not payloads:
            return out
        try:
            replies = self._push([p for _, p in payloads])
        except Exception as exc:  # the whole round trip failed: retry each later
            for index, _ in payloads:
                out[index] = exc
            return out
        for (index, payload), reply in zip(payloads, replies, strict=True):
            if isinstance(reply, Exception):
                out[index] = reply
            else:
                self.after(payload)
        return out

    def _push(self, payloads: Sequence[Payload], *, reload: bool = True) -> list[Any]:
        """The idempotent pushes in one pipelined round trip, by EVALSHA (a
        pipeline of registered scripts would first ask ``SCRIPT EXISTS``,
        one more round trip per batch); the pushes of a script Redis lost
        (a restart, ``SCRIPT FLUSH``: they did not run) are sent again once
        it is loaded.  Replies in order, an exception in place of a failed
        one."""
        assert self._client is not None and self._enqueue_script is not None
        pipe = self._client.pipeline(transaction=False)
        for p in payloads:
            pipe.evalsha(
                self._enqueue_script.sha,
                3,
                self.keys.enqueued(p.redis_message_id),
                p.messages_key,
                p.queue_key,
                p.redis_message_id,
                p.body,
                self.mark_ms,
            )
        replies: list[Any] = pipe.execute(raise_on_error=False)
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
        if lost and reload:
            self._client.script_load(self._enqueue_script.script)
            for i, reply in zip(lost, self._push([payloads[i] for i in lost], reload=False), strict=True):
                replies[i] = reply
        return replies


def _hooks(broker: Broker, name: str) -> list[tuple[Middleware, Callable[..., Any]]]:
    """The broker's middleware whose hook ``name`` does something (is not
    :class:`dramatiq.Middleware`'s no-op), in order, with the hook."""
    base = getattr(Middleware, name)
    out = []
    for middleware in broker.middleware:
        hook = getattr(middleware, name)
        if getattr(hook, "__func__", None) is not base:
            out.append((middleware, hook))
    return out


class _Template:
    """A message body cut at the values that differ between the messages
    of one schedule: its message id (also its redis message id), its
    ``cron_tick``, its timestamp and its eta."""

    def __init__(self, parts: list[str], fields: list[Callable[[Message[Any]], str]]) -> None:
        self.parts = parts
        self.fields = fields
        self.checked = False

    @classmethod
    def cut(cls, message: Message[Any], body: str) -> _Template | None:
        """The template of ``body`` (``message`` encoded), or None when a
        value to cut out does not occur exactly where expected."""
        values: list[tuple[str, Callable[[Message[Any]], str]]] = [
            # A message id is a UUID and a tick an ISO date: nothing to escape.
            (json.dumps(message.message_id), lambda m: f'"{m.message_id}"'),
            (
                f'"message_timestamp":{message.message_timestamp}',
                lambda m: f'"message_timestamp":{m.message_timestamp}',
            ),
        ]
        tick = message.options.get("cron_tick")
        if not isinstance(tick, str):
            return None
        values.append((f'"cron_tick":{json.dumps(tick)}', lambda m: f'"cron_tick":"{m.options["cron_tick"]}"'))
        if "eta" in message.options:
            values.append((f'"eta":{message.options["eta"]}', lambda m: f'"eta":{m.options["eta"]}'))
        # Each value's place in the body, in order; the message id occurs
        # twice (also as redis_message_id), every other value once.
        places: list[tuple[int, int, Callable[[Message[Any]], str]]] = []
        for n, (text, field) in enumerate(values):
            expected = 2 if n == 0 else 1
            if body.count(text) != expected:
                return None
            at = -1
            for _ in range(expected):
                at = body.index(text, at + 1)
                places.append((at, at + len(text), field))
        places.sort(key=lambda p: p[0])
        parts, fields, start = [], [], 0
        for begin, end, field in places:
            if begin < start:
                return None  # overlapping values
            parts.append(body[start:begin])
            fields.append(field)
            start = end
        parts.append(body[start:])
        return cls(parts, fields)

    def fill(self, message: Message[Any]) -> str:
        """The body of ``message``, another message of the same schedule
        and shape (the caller checks the first fill against a full
        encoding)."""
        parts = self.parts
        out = [parts[0]]
        for n, field in enumerate(self.fields):
            out.append(field(message))
            out.append(parts[n + 1])
        return "".join(out)


def boundary_for(broker: Broker, *, lease_client: redis.Redis | None, same_server: bool) -> Boundary:
    """Choose how granted ticks reach ``broker``: in the claim when the
    broker is a stock ``RedisBroker`` on the lease's own Redis, idempotent
    on another Redis, plain otherwise."""
    if not _stock_redis_broker(broker):
        return Boundary.PLAIN
    if same_server and lease_client is not None and _plain_redis(lease_client):
        return Boundary.IN_CLAIM
    return Boundary.IDEMPOTENT


def _plain_redis(client: redis.Redis) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, redis.Redis) and not isinstance(client, RedisCluster)


def _stock_redis_broker(broker: Broker) -> bool:
    try:
        from dramatiq.brokers.redis import RedisBroker
    except ImportError:  # pragma: no cover - redis is a dependency
        return False
    return (
        isinstance(broker, RedisBroker)
        and type(broker).enqueue is RedisBroker.enqueue
        and type(broker)._dispatch is RedisBroker._dispatch
        and dramatiq.__version__.split(".")[0] == "2"
        and isinstance(getattr(broker, "namespace", None), str)
        and isinstance(getattr(broker, "client", None), redis.Redis)
    )


def enqueue_many(broker: Broker, items: Sequence[tuple[Message[Any], int | None]]) -> list[BaseException | None]:
    """Enqueue ``(message, delay)`` pairs one by one through
    ``broker.enqueue``; per item None on success or the exception that made
    it fail."""
    out: list[BaseException | None] = []
    for message, delay in items:
        try:
            broker.enqueue(message, delay=delay)
        except Exception as exc:
            out.append(exc)
        else:
            out.append(None)
    return out
