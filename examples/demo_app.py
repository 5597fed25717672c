"""The demo app: two cron actors on a RedisBroker.

Run by ``scripts/demo.sh`` (through examples/demo.py), which starts several
``dramatiq examples.demo_app`` instances against one Redis.  Every run is
counted in Redis so the demo can show that each tick ran exactly once.
"""

from __future__ import annotations

import datetime as dt
import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage

from dramatiq_cron_middleware import CronMiddleware, Schedule

REDIS_URL = os.environ.get("DRAMATIQ_CRON_REDIS_URL", "redis://127.0.0.1:6379/0")

broker = RedisBroker(url=REDIS_URL)
# The middleware must be added before any actor is declared.
broker.add_middleware(CronMiddleware(lock_ttl=3000))
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)
logger = dramatiq.logging.get_logger(__name__)


@dramatiq.actor(cron="* * * * * *")
def heartbeat() -> None:
    """Runs every second (6 fields: seconds first)."""
    message = CurrentMessage.get_current_message()
    assert message is not None
    tick = message.options["cron_tick"]
    lag = dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(tick)
    runs = broker.client.hincrby("demo:runs", tick, 1)
    logger.info(
        "heartbeat for tick %s ran in pid %d, %d ms after the tick (run #%d)",
        tick,
        os.getpid(),
        lag.total_seconds() * 1000,
        runs,
    )


@dramatiq.actor(cron=Schedule("*/5 * * * * *", timezone="Europe/Berlin", kwargs={"label": "every 5 s, Berlin time"}))
def report(label: str) -> None:
    """Runs every five seconds with keyword arguments from its schedule."""
    message = CurrentMessage.get_current_message()
    assert message is not None
    logger.info("report (%s) for tick %s ran in pid %d", label, message.options["cron_tick"], os.getpid())
