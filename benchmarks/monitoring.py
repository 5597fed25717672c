"""What run monitoring adds to a worker, per cron message, against a local
redis-server.

Run: ``.venv/bin/python -m benchmarks.monitoring [--messages 5000]``

Starts a redis-server on a free loopback port, puts ``CronMiddleware`` on a
StubBroker and times the hooks a worker calls around each message
(``before_process_message``, ``after_process_message``, ``after_ack``):
for cron messages (monitoring on: a start and a finish recorded, one round
trip each) and for plain messages (monitoring off: no Redis traffic).
Prints the median and p99 per message, and the median as a multiple of its
physical limit (``benchmarks/limit.py``: two bare round trips).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from dramatiq import Message
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker

from benchmarks.limit import ratio, round_trip_us
from dramatiq_cron_middleware import CronMiddleware
from tests.support.redis_server import RedisServer


def _message(n: int, cron: bool) -> MessageProxy:
    tick = f"2030-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00"
    options = {"cron_tick": tick, "cron_schedule": f"job/{n % 100}"} if cron else {}
    return MessageProxy(Message(queue_name="default", actor_name="job", args=(), kwargs={}, options=options))


def _time(cron_middleware: CronMiddleware, broker: StubBroker, messages: list[MessageProxy]) -> list[float]:
    """Microseconds of the three hooks per message."""
    out = []
    for message in messages:
        started = time.perf_counter()
        cron_middleware.before_process_message(broker, message)
        cron_middleware.after_process_message(broker, message, result=None)
        cron_middleware.after_ack(broker, message)
        out.append((time.perf_counter() - started) * 1e6)
    return out


def _summary(name: str, samples: list[float], limit_us: float | None) -> str:
    samples = sorted(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    median = statistics.median(samples)
    against = f" ({ratio(median, limit_us)})" if limit_us else ""
    return f"{name:<34} median {median:7.1f} us{against}   p99 {p99:7.1f} us   ({len(samples)} messages)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    with RedisServer() as server:
        broker = StubBroker()
        cron = CronMiddleware(redis=server.url)
        broker.add_middleware(cron)
        warm = [_message(n, True) for n in range(200)]
        _time(cron, broker, warm)  # the client, the scripts loaded
        on = _time(cron, broker, [_message(n, True) for n in range(args.messages)])
        off = _time(cron, broker, [_message(n, False) for n in range(args.messages)])
        client = server.client()
        limit = 2 * round_trip_us(client, [("HSET", "bench:runs", str(n), "{}") for n in range(args.messages)])
        client.close()
    print(f"python {platform.python_version()}, cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    print(f"physical limit (two bare round trips): {limit:.1f} us")
    print(_summary("cron message, monitoring on", on, limit))
    print(_summary("plain message (monitoring off)", off, None))


if __name__ == "__main__":
    main()
