"""What ``CronDeduplication`` adds per message, against a local redis-server.

Run: ``.venv/bin/python -m benchmarks.dedup [--messages 5000]``

Starts a redis-server on a free loopback port, puts ``CronMiddleware`` and
``CronDeduplication`` on a StubBroker and times the middleware's
``before_process_message`` hook, which is all it adds to a message: for
cron messages seen for the first time (a claim), for duplicates (a refused
claim, then ``SkipMessage``) and for plain messages (no round trip).
Prints the median and p99 per message, the median as a multiple of its
physical limit (``benchmarks/limit.py``: one bare ``SET NX PX`` round trip,
the claim's own Redis work, timed in the same run), and the memory one mark
takes in Redis (``MEMORY USAGE`` of a key, and the growth of ``used_memory`` per
mark over ``--messages`` marks).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

from dramatiq import Message
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import SkipMessage

from benchmarks.limit import ratio, round_trip_us
from dramatiq_cron_middleware import CronDeduplication, CronMiddleware
from tests.support.redis_server import RedisServer


def _message(cron: bool) -> MessageProxy:
    options = {"cron_tick": "2030-01-01T00:00:00+00:00", "cron_schedule": "job/* * * * *@UTC"} if cron else {}
    return MessageProxy(Message(queue_name="default", actor_name="job", args=(), kwargs={}, options=options))


def _time(hook: Callable[[MessageProxy], None], messages: list[MessageProxy]) -> list[float]:
    """Microseconds per call of ``hook``, one call per message."""
    out = []
    for message in messages:
        started = time.perf_counter()
        try:
            hook(message)
        except SkipMessage:
            pass
        out.append((time.perf_counter() - started) * 1e6)
    return out


def _summary(name: str, samples: list[float], limit_us: float) -> str:
    samples = sorted(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    median = statistics.median(samples)
    return (
        f"{name:<28} median {median:7.1f} us ({ratio(median, limit_us)})   p99 {p99:7.1f} us   "
        f"({len(samples)} messages)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    with RedisServer() as server:
        broker = StubBroker()
        cron = CronMiddleware(redis=server.url)
        dedup = CronDeduplication()
        broker.add_middleware(cron)
        broker.add_middleware(dedup)

        def hook(message: MessageProxy) -> None:
            dedup.before_process_message(broker, message)

        _time(hook, [_message(True) for _ in range(200)])  # connect, load the script
        client = server.client()
        client.flushall()
        before = int(client.info("memory")["used_memory"])
        fresh = [_message(True) for _ in range(args.messages)]
        claims = _time(hook, fresh)
        after = int(client.info("memory")["used_memory"])
        duplicates = _time(hook, [MessageProxy(m._message.copy()) for m in fresh])
        plain = _time(hook, [_message(False) for _ in range(args.messages)])
        key = cron.keys.dedup(fresh[0].message_id)
        ttl = dedup.effective_ttl(broker)
        limit = round_trip_us(client, (("SET", f"limit:{n}", "1|token", "NX", "PX", ttl) for n in range(args.messages)))
        client.delete(*(f"limit:{n}" for n in range(args.messages)))
        info = client.info("server")
        print(f"redis-server {info['redis_version']} on 127.0.0.1, Python {platform.python_version()}")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
        print(f"mark TTL {ttl} ms, e.g. {key} = {client.get(key)!r}")
        print(f"limit: one bare SET NX PX round trip, median {limit:.1f} us")
        print(_summary("cron message, first copy", claims, limit))
        print(_summary("cron message, duplicate", duplicates, limit))
        print(_summary("plain message", plain, limit))
        print(f"memory per mark: MEMORY USAGE {client.memory_usage(key)} bytes; used_memory grew by ", end="")
        print(f"{(after - before) / args.messages:.0f} bytes per mark over {args.messages} marks")
        assert client.dbsize() == args.messages


if __name__ == "__main__":
    main()
