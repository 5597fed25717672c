"""The app the behaviour tests run under real ``dramatiq`` processes.

Configured by environment variables so each test can shape it:

- ``DRAMATIQ_CRON_REDIS_URL``: where the lease lives (read by the middleware).
- ``CRON_APP_BROKER``: ``stub`` (default) or a Redis URL for a RedisBroker.
- ``CRON_APP_RECORD``: a directory; every cron enqueue and every run is
  appended as a JSON line to ``enqueues-<pid>.jsonl`` / ``runs-<pid>.jsonl``.
- ``CRON_APP_CRON``: the expression of each actor (default every second).
- ``CRON_APP_ACTORS``: how many such actors (default 1).
- ``CRON_APP_TTL``, ``CRON_APP_PREFIX``, ``CRON_APP_CATCH_UP``,
  ``CRON_APP_CATCH_UP_WINDOW``: middleware arguments.
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
                    "at": time.time(),
                },
            )


def _broker() -> dramatiq.Broker:
    spec = os.environ.get("CRON_APP_BROKER", "stub")
    if spec == "stub":
        return StubBroker()
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
broker.add_middleware(CronMiddleware(**_kwargs))
broker.add_middleware(Recorder())
broker.add_middleware(dramatiq.middleware.CurrentMessage())
dramatiq.set_broker(broker)

_CRON = os.environ.get("CRON_APP_CRON", "* * * * * *")


def _make_actor(index: int) -> dramatiq.Actor[Any, Any]:
    def tick() -> None:
        message = dramatiq.middleware.CurrentMessage.get_current_message()
        _append(
            "runs",
            {
                "pid": os.getpid(),
                "actor": f"tick_{index}",
                "tick": message.options.get("cron_tick") if message else None,
                "at": time.time(),
            },
        )

    tick.__name__ = f"tick_{index}"
    return dramatiq.actor(tick, actor_name=f"tick_{index}", cron=_CRON, max_retries=0)


actors = [_make_actor(i) for i in range(int(os.environ.get("CRON_APP_ACTORS", "1")))]


@dramatiq.actor(max_retries=0)
def plain_job(n: int) -> None:
    """A non-cron actor, to show workers keep processing during faults."""
    _append("jobs", {"pid": os.getpid(), "n": n, "at": time.time()})
