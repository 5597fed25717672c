"""The app the run monitoring tests run under real ``dramatiq`` processes.

Configured by environment variables:

- ``DRAMATIQ_CRON_REDIS_URL``: the scheduler's Redis.
- ``MON_BROKER``: ``stub`` (default) or a Redis URL for a RedisBroker.
- ``MON_RECORD``: a directory: every alert ``on_alert`` gets is appended
  to ``alerts-<pid>.jsonl``; the actors read and write marker files there.
- ``MON_ACTORS``: which actors have a schedule, comma-separated (default
  ``tick``): ``tick`` succeeds; ``flaky`` raises until the file ``fixed``
  exists; ``slow`` sleeps ``MON_SLOW_S`` seconds (default 2.5), on the queue
  ``slow``, ``max_runtime`` ``MON_MAX_RUNTIME`` (default 1000); ``unconsumed``
  is on the queue ``nobody``; ``blocker`` writes ``started``, waits for the
  file ``go``, then writes ``done``.  Each fires every second.
- ``MON_TTL`` (default 1000), ``MON_GRACE`` (default 1000),
  ``MON_THRESHOLD`` (default 2), ``MON_ALERT_FOR`` (default 0),
  ``MON_WEBHOOK``: middleware arguments.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.monitoring import Alert

_RECORD = os.environ.get("MON_RECORD", "")
_LOCK = threading.Lock()


def _path(name: str) -> str:
    return os.path.join(_RECORD, name)


def _record_alert(alert: Alert) -> None:
    with _LOCK, open(_path(f"alerts-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(alert.to_json()) + "\n")


def _broker() -> dramatiq.Broker:
    spec = os.environ.get("MON_BROKER", "stub")
    if spec == "stub":
        return StubBroker()
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(url=spec)


broker = _broker()
_options: dict[str, Any] = {
    "lock_ttl": int(os.environ.get("MON_TTL", "1000")),
    "grace": int(os.environ.get("MON_GRACE", "1000")),
    "failure_threshold": int(os.environ.get("MON_THRESHOLD", "2")),
    "on_alert": _record_alert,
    "alert_for": int(os.environ.get("MON_ALERT_FOR", "0")),
}
if "MON_WEBHOOK" in os.environ:
    _options["alert_webhook"] = os.environ["MON_WEBHOOK"]
broker.add_middleware(CronMiddleware(**_options))
dramatiq.set_broker(broker)

_ACTORS = set(os.environ.get("MON_ACTORS", "tick").split(","))
_EVERY_SECOND = "* * * * * *"


def _cron(name: str, **options: Any) -> Schedule | None:
    return Schedule(_EVERY_SECOND, **options) if name in _ACTORS else None


@dramatiq.actor(cron=_cron("tick"), max_retries=0)
def tick() -> None:
    pass


@dramatiq.actor(cron=_cron("flaky"), max_retries=0)
def flaky() -> None:
    if not os.path.exists(_path("fixed")):
        raise RuntimeError("flaky failed")


@dramatiq.actor(
    cron=_cron("slow", max_runtime=int(os.environ.get("MON_MAX_RUNTIME", "1000")), overlap="skip"),
    queue_name="slow",
    max_retries=0,
)
def slow() -> None:
    time.sleep(float(os.environ.get("MON_SLOW_S", "2.5")))


@dramatiq.actor(cron=_cron("unconsumed"), queue_name="nobody", max_retries=0)
def unconsumed() -> None:
    pass


@dramatiq.actor(cron=_cron("blocker", overlap="skip"), max_retries=0)
def blocker() -> None:
    open(_path("started"), "a").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(_path("go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    with open(_path("done"), "a") as f:
        f.write(f"{os.getpid()}\n")
