"""A test app with one per-second ``overlap="skip"`` schedule whose actor
runs longer than a second.

- ``DRAMATIQ_CRON_REDIS_URL``: the lease's Redis; ``CRON_APP_BROKER``: the
  broker's Redis URL (a RedisBroker, so the worker really consumes).
- ``CRON_APP_RECORD``: every run start and end is appended to
  ``runs-<pid>.jsonl``.
- ``CRON_APP_SLEEP_MS``: how long each run takes (default 2500).
- ``CRON_APP_OVERLAP_TTL``: the schedule's ``overlap_ttl`` (default 4000).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule

_RECORD = os.environ.get("CRON_APP_RECORD", "")


def _append(record: dict[str, Any]) -> None:
    if _RECORD:
        with open(os.path.join(_RECORD, f"runs-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")


broker = RedisBroker(url=os.environ["CRON_APP_BROKER"])
broker.add_middleware(CronMiddleware(lock_ttl=int(os.environ.get("CRON_APP_TTL", "2000"))))
broker.add_middleware(dramatiq.middleware.CurrentMessage())
dramatiq.set_broker(broker)


@dramatiq.actor(
    max_retries=0,
    cron=Schedule(
        "* * * * * *",
        name="slow",
        overlap="skip",
        overlap_ttl=int(os.environ.get("CRON_APP_OVERLAP_TTL", "4000")),
    ),
)
def slow_job() -> None:
    """Runs longer than the schedule's period."""
    message = dramatiq.middleware.CurrentMessage.get_current_message()
    tick = message.options.get("cron_tick") if message else None
    _append({"event": "start", "tick": tick, "pid": os.getpid(), "at": time.time()})
    time.sleep(int(os.environ.get("CRON_APP_SLEEP_MS", "2500")) / 1000)
    _append({"event": "end", "tick": tick, "pid": os.getpid(), "at": time.time()})
