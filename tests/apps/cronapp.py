"""The app the behaviour tests run under real ``dramatiq`` processes.

Configured by environment variables so each test can shape it:

- ``DRAMATIQ_CRON_REDIS_URL``: where the lease lives (read by the middleware).
- ``CRON_APP_BROKER``: ``stub`` (default), a Redis URL for a RedisBroker or
  an ``amqp://`` URL for a RabbitmqBroker.
- ``CRON_APP_RECORD``: a directory; every cron enqueue and every run is
  appended as a JSON line to ``enqueues-<pid>.jsonl`` / ``runs-<pid>.jsonl``.
- ``CRON_APP_CRON``: the expression of each actor (default every second).
- ``CRON_APP_ACTORS``: how many such actors (default 1).
- ``CRON_APP_TTL``, ``CRON_APP_PREFIX``, ``CRON_APP_CATCH_UP``,
  ``CRON_APP_CATCH_UP_WINDOW``, ``CRON_APP_FAST_TAKEOVER``: middleware
  arguments.
- ``CRON_APP_WALL_CLOCK_JUMP``: ``"<after s>:<offset s>"`` makes this
  process's ``time.time`` jump by the offset after that long (a per-process
  fake wall clock; the machine's clock is never touched).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Middleware

from dramatiq_cron_middleware import CronMiddleware

_RECORD = os.environ.get("CRON_APP_RECORD")
_LOCK = threading.Lock()
# Records are stamped with the real wall clock even when the app fakes a
# jump of its own (CRON_APP_WALL_CLOCK_JUMP), so the history stays comparable.
_true_time = time.time


def _install_wall_clock_jump(spec: str) -> None:
    """Make this process's ``time.time`` jump by ``offset`` seconds once
    ``after`` seconds have passed (``"<after>:<offset>"``).  The machine's
    clock is untouched: only code that reads ``time.time`` in this process
    sees the jump, which is what the scheduler must not depend on."""
    after, offset = (float(part) for part in spec.split(":"))
    started = time.monotonic()

    def jumped() -> float:
        return _true_time() + (offset if time.monotonic() - started >= after else 0.0)

    time.time = jumped


if os.environ.get("CRON_APP_WALL_CLOCK_JUMP"):
    _install_wall_clock_jump(os.environ["CRON_APP_WALL_CLOCK_JUMP"])


def _append(kind: str, record: dict[str, Any]) -> None:
    if not _RECORD:
        return
    line = json.dumps(record) + "\n"
    with _LOCK, open(os.path.join(_RECORD, f"{kind}-{os.getpid()}.jsonl"), "a") as f:
        f.write(line)
        f.flush()


class Recorder(Middleware):
    """Writes every cron enqueue down, for the history checker."""

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        if "cron_tick" in message.options:
            _append(
                "enqueues",
                {
                    "pid": os.getpid(),
                    "actor": message.actor_name,
                    "schedule": message.options.get("cron_schedule"),
                    "tick": message.options["cron_tick"],
                    "message_id": message.message_id,
                    "manual": bool(message.options.get("cron_manual")),
                    "at": _true_time(),
                },
            )


def _broker() -> dramatiq.Broker:
    spec = os.environ.get("CRON_APP_BROKER", "stub")
    if spec == "stub":
        return StubBroker()
    if spec.startswith(("amqp://", "amqps://")):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=spec)
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(url=spec)


broker = _broker()
_kwargs: dict[str, Any] = {}
if "CRON_APP_TTL" in os.environ:
    _kwargs["lock_ttl"] = int(os.environ["CRON_APP_TTL"])
if "CRON_APP_PREFIX" in os.environ:
    _kwargs["prefix"] = os.environ["CRON_APP_PREFIX"]
if "CRON_APP_CATCH_UP" in os.environ:
    _kwargs["catch_up"] = os.environ["CRON_APP_CATCH_UP"]
if "CRON_APP_CATCH_UP_WINDOW" in os.environ:
    _kwargs["catch_up_window"] = int(os.environ["CRON_APP_CATCH_UP_WINDOW"])
if "CRON_APP_FAST_TAKEOVER" in os.environ:
    _kwargs["fast_takeover"] = int(os.environ["CRON_APP_FAST_TAKEOVER"])
broker.add_middleware(CronMiddleware(**_kwargs))
broker.add_middleware(Recorder())
broker.add_middleware(dramatiq.middleware.CurrentMessage())
dramatiq.set_broker(broker)

_CRON = os.environ.get("CRON_APP_CRON", "* * * * * *")


def _make_actor(index: int) -> dramatiq.Actor[Any, Any]:
    def tick(*args: Any, **kwargs: Any) -> None:  # (runtime schedules may pass some)
        message = dramatiq.middleware.CurrentMessage.get_current_message()
        _append(
            "runs",
            {
                "pid": os.getpid(),
                "actor": f"tick_{index}",
                "schedule": message.options.get("cron_schedule") if message else None,
                "tick": message.options.get("cron_tick") if message else None,
                "at": _true_time(),
            },
        )

    tick.__name__ = f"tick_{index}"
    return dramatiq.actor(tick, actor_name=f"tick_{index}", cron=_CRON, max_retries=0)


actors = [_make_actor(i) for i in range(int(os.environ.get("CRON_APP_ACTORS", "1")))]


@dramatiq.actor(max_retries=0)
def plain_job(n: int) -> None:
    """A non-cron actor, to show workers keep processing during faults."""
    _append("jobs", {"pid": os.getpid(), "n": n, "at": _true_time()})
