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
  ``CRON_APP_CATCH_UP_WINDOW``, ``CRON_APP_FAST_TAKEOVER``,
  ``CRON_APP_ONE_SHOT_RETENTION``: middleware arguments.
- ``CRON_APP_MAX_AGE``: the ``max_age`` of every cron schedule (ms; dramatiq's
  ``AgeLimit`` drops a message older than that, by the consumer's clock).
- ``CRON_APP_EVERY``: ``"<every ms>:<offset ms>"`` adds the actor
  ``long_tick`` on that interval schedule.
- A process on a wall-clock shim (tests/support/faketime.py: every
  reader of this process's wall clock moved) still stamps its records with
  the real wall clock, so the history stays comparable.
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

from dramatiq_cron_middleware import CronMiddleware, Schedule

_RECORD = os.environ.get("CRON_APP_RECORD")
_LOCK = threading.Lock()
_SHIM = os.environ.get("CRON_WALL_CLOCK_FILE")


def _shim_offset() -> float:
    assert _SHIM is not None
    with open(_SHIM) as f:
        return float(f.read().strip() or 0)


def _true_time() -> float:
    """The machine's wall clock, also on a clock shim: the shimmed clock
    less the shim's offset, read on both sides of the clock (a step in
    between reads again)."""
    if _SHIM is None:
        return time.time()
    while True:
        offset = _shim_offset()
        shimmed = time.time()
        if _shim_offset() == offset:
            return shimmed - offset


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
                    "backfill": bool(message.options.get("cron_backfill")),
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
if "CRON_APP_ONE_SHOT_RETENTION" in os.environ:
    _kwargs["one_shot_retention"] = int(os.environ["CRON_APP_ONE_SHOT_RETENTION"])
if "CRON_APP_FAST_TAKEOVER" in os.environ:
    _kwargs["fast_takeover"] = int(os.environ["CRON_APP_FAST_TAKEOVER"])
broker.add_middleware(CronMiddleware(**_kwargs))
broker.add_middleware(Recorder())
broker.add_middleware(dramatiq.middleware.CurrentMessage())
dramatiq.set_broker(broker)

_CRON = os.environ.get("CRON_APP_CRON", "* * * * * *")
_MAX_AGE = int(os.environ["CRON_APP_MAX_AGE"]) if "CRON_APP_MAX_AGE" in os.environ else None


def _make_actor(name: str, schedule: Schedule) -> dramatiq.Actor[Any, Any]:
    def tick(*args: Any, **kwargs: Any) -> None:  # (runtime schedules may pass some)
        message = dramatiq.middleware.CurrentMessage.get_current_message()
        _append(
            "runs",
            {
                "pid": os.getpid(),
                "actor": name,
                "schedule": message.options.get("cron_schedule") if message else None,
                "tick": message.options.get("cron_tick") if message else None,
                "at": _true_time(),
            },
        )

    tick.__name__ = name
    return dramatiq.actor(tick, actor_name=name, cron=schedule, max_retries=0)


actors = [
    _make_actor(f"tick_{i}", Schedule(_CRON, max_age=_MAX_AGE))
    for i in range(int(os.environ.get("CRON_APP_ACTORS", "1")))
]
if "CRON_APP_EVERY" in os.environ:
    _every, _offset = (int(part) for part in os.environ["CRON_APP_EVERY"].split(":"))
    actors.append(_make_actor("long_tick", Schedule(every=_every, offset=_offset, max_age=_MAX_AGE)))


@dramatiq.actor(max_retries=0)
def plain_job(n: int) -> None:
    """A non-cron actor, to show workers keep processing during faults."""
    _append("jobs", {"pid": os.getpid(), "n": n, "at": _true_time()})
