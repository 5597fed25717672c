"""The app of the worker-side deduplication tests, under real ``dramatiq``
processes.

- ``DRAMATIQ_CRON_REDIS_URL``: where the marks live (the CronMiddleware's Redis).
- ``CRON_APP_BROKER``: an ``amqp://`` URL (RabbitmqBroker) or a Redis URL
  (RedisBroker).
- ``CRON_APP_RECORD``: a directory; every run of ``job`` is appended as a
  JSON line to ``runs-<pid>.jsonl``.
- ``DEDUP_APP_RUN_MS``: how long ``job`` runs (default 500), so that a
  duplicate is delivered while the first copy is still running.
"""

from __future__ import annotations

import json
import os
import time

import dramatiq
from dramatiq.middleware import CurrentMessage

from dramatiq_cron_middleware import CronDeduplication, CronMiddleware


def _broker() -> dramatiq.Broker:
    spec = os.environ["CRON_APP_BROKER"]
    if spec.startswith(("amqp://", "amqps://")):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=spec)
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(url=spec)


broker = _broker()
broker.add_middleware(CronMiddleware())
broker.add_middleware(CronDeduplication())
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=0)
def job() -> None:
    """Records its run, then takes ``DEDUP_APP_RUN_MS``."""
    message = CurrentMessage.get_current_message()
    assert message is not None
    record = {"pid": os.getpid(), "message_id": message.message_id, "tick": message.options.get("cron_tick")}
    with open(os.path.join(os.environ["CRON_APP_RECORD"], f"runs-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
    time.sleep(int(os.environ.get("DEDUP_APP_RUN_MS", "500")) / 1000)
