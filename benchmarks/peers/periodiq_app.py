"""Actors for the periodiq peer (``periodiq periodiq_app``):
``PEER_COUNT`` actors on a ``* * * * *`` schedule."""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from periodiq import PeriodiqMiddleware, cron
from recorder import LagRecorder

broker = RedisBroker(url=os.environ["PEER_BROKER_URL"])
broker.add_middleware(PeriodiqMiddleware(skip_delay=30))
broker.add_middleware(LagRecorder(os.environ["PEER_RECORD"]))
dramatiq.set_broker(broker)


def _declare(index):
    def job():
        pass

    return dramatiq.actor(job, actor_name=f"peer_job_{index}", queue_name="peer", periodic=cron("* * * * *"))


actors = [_declare(i) for i in range(int(os.environ.get("PEER_COUNT", "1")))]
