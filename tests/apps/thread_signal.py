"""tests/apps/cronapp.py, with SIGTERM delivered to a thread other than
the main one.

The kernel gives a process's signal to any thread that does not block
it; CPython runs the Python-level handler on the main thread.  This app's
thread waits on the Redis list ``{signal-test}:deliver`` and, for each
push, sends SIGTERM to itself (``pthread_kill``), as the kernel does when
it picks this thread.  The main thread sleeps in dramatiq's worker loop
meanwhile.
"""

from __future__ import annotations

import os
import signal
import threading

import dramatiq
import redis
from dramatiq.middleware import Middleware

from dramatiq_cron_middleware import CronMiddleware
from tests.apps.cronapp import broker

__all__ = ["broker"]

DELIVER = "{signal-test}:deliver"


def _deliver_to_this_thread() -> None:
    client = redis.Redis.from_url(os.environ["DRAMATIQ_CRON_REDIS_URL"])
    while True:
        client.blpop([DELIVER])
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


class ThreadSignal(Middleware):
    """Starts the thread that signals itself."""

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        threading.Thread(target=_deliver_to_this_thread, name="signal-me", daemon=True).start()


broker.add_middleware(ThreadSignal(), before=CronMiddleware)
