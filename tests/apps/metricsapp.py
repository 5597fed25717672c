"""The test app (tests/apps/cronapp.py) with :class:`CronMetrics` added.

With ``CRON_APP_DRAMATIQ_PROMETHEUS=1`` dramatiq's own ``Prometheus``
middleware is added too, so the cron metrics go through its exposition
(configured by dramatiq's ``dramatiq_prom_*`` variables).  With
``CRON_APP_FAILING=1`` the cron actor ``fails`` raises at every tick (each
second), without retries.  ``CRON_APP_HEALTH_INTERVAL`` is
``CronMetrics(health_interval=...)``.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.middleware.prometheus import Prometheus

from dramatiq_cron_middleware.metrics import CronMetrics
from tests.apps.cronapp import actors, broker

__all__ = ["actors", "broker"]

if os.environ.get("CRON_APP_DRAMATIQ_PROMETHEUS") == "1":
    broker.add_middleware(Prometheus())
broker.add_middleware(CronMetrics(health_interval=int(os.environ.get("CRON_APP_HEALTH_INTERVAL", "15000"))))

if os.environ.get("CRON_APP_FAILING") == "1":

    @dramatiq.actor(cron="* * * * * *", max_retries=0)
    def fails() -> None:
        raise RuntimeError("fails at every tick")
