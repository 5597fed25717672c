"""What the middleware costs a worker's ordinary (non-cron) messages.

Run: ``.venv/bin/python -m benchmarks.plain_messages [--messages 20000] [--rounds 3]``

Sends ``--messages`` no-op messages through a real ``dramatiq.Worker`` with
8 threads, with and without ``CronMiddleware`` (run monitoring on, its
default), on a ``RedisBroker`` (a redis-server on a free loopback port) and
on a ``StubBroker``, alternating the two variants ``--rounds`` times in one
run.  Prints each round's throughput once the first message has run (the
worker's boot is a cost per process, printed apart) and the ratio
with/without: 1.0 means the middleware costs plain messages nothing
measurable.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from tests.support.redis_server import RedisServer


class Throughput(NamedTuple):
    per_s: float  #: messages per second, once the first has run
    boot_s: float  #: how long ``Worker.start()`` took


def _throughput(make_broker: Callable[[], dramatiq.Broker], messages: int, *, cron: bool, url: str) -> Throughput:
    """Messages per second through a Worker with 8 threads."""
    broker = make_broker()
    if cron:
        broker.add_middleware(CronMiddleware(redis=url))
    done = threading.Semaphore(0)

    @dramatiq.actor(broker=broker, max_retries=0)
    def noop() -> None:
        done.release()

    for _ in range(messages):
        noop.send()
    worker = dramatiq.Worker(broker, worker_threads=8, worker_timeout=100)
    booting = time.perf_counter()
    worker.start()
    booted = time.perf_counter()
    # The clock starts at the first message's end: the worker's boot (with
    # the middleware: its Redis connections, boot checks and threads) is a
    # cost per process, printed apart, not per message.
    done.acquire()
    started = time.perf_counter()
    for _ in range(messages - 1):
        done.acquire()
    elapsed = time.perf_counter() - started
    worker.stop()
    broker.close()
    return Throughput((messages - 1) / elapsed, booted - booting)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"# {platform.node()}: {args.messages} no-op messages, 8 worker threads, {args.rounds} rounds")
    with RedisServer() as server:
        client = server.client()

        def redis_broker() -> dramatiq.Broker:
            client.flushall()
            return RedisBroker(url=server.url)

        brokers: dict[str, Callable[[], dramatiq.Broker]] = {"RedisBroker": redis_broker, "StubBroker": StubBroker}
        for name, make in brokers.items():
            ratios = []
            for round_ in range(1, args.rounds + 1):
                without = _throughput(make, args.messages, cron=False, url=server.url)
                with_ = _throughput(make, args.messages, cron=True, url=server.url)
                ratios.append(with_.per_s / without.per_s)
                print(
                    f"{name:<12} round {round_}: without {without.per_s:8.0f} msg/s   with {with_.per_s:8.0f} msg/s   "
                    f"ratio {ratios[-1]:.3f}   "
                    f"(Worker.start: {without.boot_s * 1000:.0f} / {with_.boot_s * 1000:.0f} ms)"
                )
            print(f"{name:<12} ratio with/without: median {statistics.median(ratios):.3f} (goal >= 0.98)")


if __name__ == "__main__":
    main()
