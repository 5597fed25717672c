"""An app whose ``report`` actor has a named and an unnamed schedule, and
whose ``send_report`` actor takes runtime schedules: the operator tests
(``tests/test_operator_targets.py``) act on it through ``dramatiq-cron``.

``DRAMATIQ_CRON_REDIS_URL`` holds the scheduler's keys; ``REPORT_APP_BROKER``
is the RedisBroker's URL, so triggered messages can be read back.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule

broker = RedisBroker(url=os.environ["REPORT_APP_BROKER"])
broker.add_middleware(CronMiddleware(lock_ttl=2000))
dramatiq.set_broker(broker)


@dramatiq.actor(cron=[Schedule("30 1 * * *", name="nightly", kwargs={"full": True}), "*/10 * * * *"])
def report(full: bool = False) -> None:
    """Declared first with its named schedule, as in the README."""


@dramatiq.actor
def send_report(tenant_id: int = 0) -> None:
    """Runtime schedules only, one per tenant."""


@dramatiq.actor(cron="0 4 * * *")
def cleanup() -> None:
    """One unnamed schedule: its actor name is unambiguous."""
