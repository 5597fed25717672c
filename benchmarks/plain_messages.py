"""What the middleware costs a worker's ordinary (non-cron) messages.

Run: ``.venv/bin/python -m benchmarks.plain_messages [--messages 20000] [--rounds 3]``

Sends ``--messages`` no-op messages through a real ``dramatiq.Worker`` with
8 threads, with and without ``CronMiddleware`` (run monitoring on, its
default), on a ``RedisBroker`` (a redis-server on a free loopback port) and
on a ``StubBroker``, alternating the two variants ``--rounds`` times in one
run.  Prints each round's throughput and the ratio with/without: 1.0 means
the middleware costs plain messages nothing measurable.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time
from collections.abc import Callable

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from tests.support.redis_server import RedisServer


def _throughput(make_broker: Callable[[], dramatiq.Broker], messages: int, *, cron: bool, url: str) -> float:
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
    started = time.perf_counter()
    worker.start()
    for _ in range(messages):
        done.acquire()
    elapsed = time.perf_counter() - started
    worker.stop()
    broker.close()
    return messages / elapsed


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
                ratios.append(with_ / without)
                print(
                    f"{name:<12} round {round_}: without {without:8.0f} msg/s   with {with_:8.0f} msg/s   "
                    f"ratio {with_ / without:.3f}"
                )
            print(f"{name:<12} ratio with/without: median {statistics.median(ratios):.3f} (goal >= 0.98)")


if __name__ == "__main__":
    main()
