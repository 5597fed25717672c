"""tests/apps/cronapp.py, with SIGTERM delivered to a thread other than
the main one.

The kernel gives a process's signal to any thread that does not block
it; CPython runs the Python-level handler on the main thread.  This app's
thread waits on the Redis list ``{signal-test}:deliver`` and, for each
push, sends SIGTERM to itself (``pthread_kill``), as the kernel does when
it picks this thread.  The main thread sleeps in dramatiq's worker loop
meanwhile, and that loop's one-second sleep is made an hour long here,
cut short only once the SIGTERM handler has run: so the handler runs,
and the lease is released, only if something interrupts the main
thread's sleep.  Left to wait for the sleep to end, the lease expires
first, however slow or fast the machine.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from types import FrameType
from typing import Any

import dramatiq
import dramatiq.cli
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


_handled_r, _handled_w = os.pipe()


class _HourLongSleep:
    """What dramatiq's worker loop finds as ``time``: its ``sleep(1)``
    lasts until the SIGTERM handler has run (or an hour)."""

    @staticmethod
    def sleep(seconds: float) -> None:
        select.select([_handled_r], [], [], 3600)


class ThreadSignal(Middleware):
    """Starts the thread that signals itself, and makes the main thread's
    sleep end only after the SIGTERM handler ran."""

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        previous = signal.getsignal(signal.SIGTERM)
        assert callable(previous)

        def outermost(signum: int, frame: FrameType | None) -> Any:
            try:
                return previous(signum, frame)
            finally:
                os.write(_handled_w, b"x")

        signal.signal(signal.SIGTERM, outermost)
        dramatiq.cli.time = _HourLongSleep  # type: ignore[assignment]
        threading.Thread(target=_deliver_to_this_thread, name="signal-me", daemon=True).start()


# dramatiq runs after_* hooks in reverse order: placed before the cron
# middleware, this hook runs after it and wraps the handler it chained.
broker.add_middleware(ThreadSignal(), before=CronMiddleware)
