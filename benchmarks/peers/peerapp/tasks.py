"""Actors for the dramatiq-crontab peer: ``PEER_COUNT`` actors on a
``* * * * *`` cron, or on a one-second interval with ``PEER_INTERVAL=1``."""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq_crontab import cron, interval
from recorder import LagRecorder

broker = RedisBroker(url=os.environ["PEER_BROKER_URL"])
broker.add_middleware(LagRecorder(os.environ["PEER_RECORD"]))
dramatiq.set_broker(broker)


def _declare(index):
    def job():
        pass

    actor = dramatiq.actor(job, actor_name=f"peer_job_{index}", queue_name="peer")
    if os.environ.get("PEER_INTERVAL") == "1":
        return interval(seconds=1)(actor)
    return cron("* * * * *")(actor)


actors = [_declare(i) for i in range(int(os.environ.get("PEER_COUNT", "1")))]
