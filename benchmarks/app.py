"""The dramatiq app the benchmarks run under real ``dramatiq`` processes.

Configured by environment variables, so one module serves every scenario:

- ``DRAMATIQ_CRON_REDIS_URL``: the lease Redis (read by the middleware).
- ``BENCH_BROKER``: ``stub`` (default) or a Redis URL for a ``RedisBroker``
  (a *different* Redis from the lease one, so broker traffic never hides
  the scheduler's own).
- ``BENCH_SCHEDULES``: how many schedules (default 1).
- ``BENCH_SHAPE``: ``every-second`` (all schedules fire every second),
  ``spread`` (each schedule fires once every two minutes, at a second and
  minute parity derived from its index, so about 0.8% fall due each
  second) or ``idle`` (yearly: nothing falls due during a run).
- ``BENCH_TTL``: the middleware's ``lock_ttl``.
- ``BENCH_RECORD``: a directory; every cron enqueue is written to
  ``lag-<pid>.tsv`` as ``<tick iso>\\t<enqueued at, epoch s>``.

All schedules sit on one actor (named ``Schedule``s), so the memory figure
is the scheduler's, not the cost of declaring thousands of actors.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO, Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Middleware

from dramatiq_cron_middleware import CronMiddleware, Schedule


class LagRecorder(Middleware):
    """Notes when each cron message was enqueued.

    Writing a line per message to disk inside ``after_enqueue`` would add
    the benchmark's own I/O to the lag it measures, so lines go to a
    buffered file that a small thread flushes a few times a second.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """Record (tick, now) for a cron message."""
        tick = message.options.get("cron_tick")
        if tick is None:
            return
        at = time.time()
        with self._lock:
            if self._file is None:
                self._file = open(os.path.join(self.directory, f"lag-{os.getpid()}.tsv"), "a", buffering=1 << 20)
                threading.Thread(target=self._flush_forever, name="bench-flush", daemon=True).start()
            self._file.write(f"{tick}\t{at:.6f}\n")

    def _flush_forever(self) -> None:
        while True:
            time.sleep(0.25)
            with self._lock:
                if self._file is not None:
                    self._file.flush()


def _expressions(count: int, shape: str) -> list[Schedule]:
    if shape == "every-second":
        return [Schedule("* * * * * *", name=f"s{i}") for i in range(count)]
    if shape == "spread":
        # Second i % 60, on even or odd minutes: each schedule fires once
        # every 120 s, and count/120 schedules fall due in each second.
        return [
            Schedule(f"{i % 60} {'*/2' if (i // 60) % 2 == 0 else '1-59/2'} * * * *", name=f"s{i}")
            for i in range(count)
        ]
    if shape == "idle":
        return [Schedule("0 0 1 1 *", name=f"s{i}") for i in range(count)]
    raise SystemExit(f"unknown BENCH_SHAPE {shape!r}")


def _broker() -> dramatiq.Broker:
    spec = os.environ.get("BENCH_BROKER", "stub")
    if spec == "stub":
        return StubBroker()
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(url=spec)


broker = _broker()
_kwargs: dict[str, Any] = {}
if "BENCH_TTL" in os.environ:
    _kwargs["lock_ttl"] = int(os.environ["BENCH_TTL"])
if os.environ.get("BENCH_FAST_TAKEOVER"):
    _kwargs["fast_takeover"] = int(os.environ["BENCH_FAST_TAKEOVER"])
broker.add_middleware(CronMiddleware(**_kwargs))
if os.environ.get("BENCH_RECORD"):
    broker.add_middleware(LagRecorder(os.environ["BENCH_RECORD"]))
dramatiq.set_broker(broker)

_COUNT = int(os.environ.get("BENCH_SCHEDULES", "1"))
_SHAPE = os.environ.get("BENCH_SHAPE", "every-second")


class ThreadIds(Middleware):
    """Writes the native id of each named thread to ``threads-<pid>.json``,
    so the driver can read the leader thread's own CPU time from /proc."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        """Write the ids once the leader thread has started."""

        def write() -> None:
            time.sleep(0.5)
            ids = {t.name: t.native_id for t in threading.enumerate()}
            with open(os.path.join(self.directory, f"threads-{os.getpid()}.json"), "w") as f:
                json.dump(ids, f)

        threading.Thread(target=write, daemon=True).start()


if os.environ.get("BENCH_RECORD"):
    broker.add_middleware(ThreadIds(os.environ["BENCH_RECORD"]))


@dramatiq.actor(queue_name="bench-idle")
def bench_idle() -> None:
    """The only queue the benchmark workers consume (``-Q bench-idle``), so
    they spend no CPU running the cron messages whose enqueue is measured."""


@dramatiq.actor(cron=_expressions(_COUNT, _SHAPE) if _COUNT else None, max_retries=0, queue_name="bench")
def bench_tick() -> None:
    """Does nothing: the benchmarks measure enqueues, not work."""
