"""The physical limit beside a benchmark's figure: the bare Redis work of
the same ticks, timed the same way on the same Redis in the same run.

Run alone: ``.venv/bin/python -m benchmarks.limit [--ticks 1000] [--schedules 1000] [--reps 5]``

For each batch of ticks, one Lua script does only what must reach Redis
for them: the ledger writes (one ``HSET`` of ``{p}:ticks``), the history
entries (an ``XADD`` each, capped like the leader's) and the messages in
dramatiq's layout (an ``HSET`` of the bodies and an ``RPUSH`` of the ids).
No fencing, no validation, no planning, no hooks: whatever a benchmark
measures above this is our overhead, so its figure divided by the limit
(``x limit``) carries from one machine to another where the absolute
figure does not.  The message bodies are real ones (``message_for``), built
before the clock starts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import redis

from dramatiq_cron_middleware.schedules.planner import message_for, message_id_for
from dramatiq_cron_middleware.schedules.schedule import schedules_for_actor
from dramatiq_cron_middleware.store.keys import Keys

# KEYS[1] - the ledger hash
# KEYS[2] - the history stream
# KEYS[3] - the queue's list (dramatiq: the queue name)
# KEYS[4] - the queue's message hash (dramatiq: "<queue>.msgs")
# ARGV[1] - the history cap
# ARGV[2...] - per tick: schedule id, tick ms, message id, body
# Returns the number of ticks written.
_SCRIPT = """
local ledger, bodies, ids = {}, {}, {}
local n = (#ARGV - 1) / 4
for i = 0, n - 1 do
  local sid, tick, mid = ARGV[2 + 4 * i], ARGV[3 + 4 * i], ARGV[4 + 4 * i]
  ledger[#ledger + 1] = sid
  ledger[#ledger + 1] = tick .. ':1:1'
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'schedule', sid, 'tick', tick,
             'outcome', 'fired', 'at', tick, 'epoch', 1, 'detail', '0', 'message_id', mid)
  bodies[#bodies + 1] = mid
  bodies[#bodies + 1] = ARGV[5 + 4 * i]
  ids[#ids + 1] = mid
  if #ids >= 500 then
    redis.call('HSET', KEYS[4], unpack(bodies))
    redis.call('RPUSH', KEYS[3], unpack(ids))
    bodies, ids = {}, {}
  end
  if #ledger >= 1000 then
    redis.call('HSET', KEYS[1], unpack(ledger))
    ledger = {}
  end
end
if #ids > 0 then
  redis.call('HSET', KEYS[4], unpack(bodies))
  redis.call('RPUSH', KEYS[3], unpack(ids))
end
if #ledger > 0 then redis.call('HSET', KEYS[1], unpack(ledger)) end
return n
"""

QUEUE = "limit:default"
BATCH = 1000  # the tick queue's batch of claims


@dataclass(frozen=True)
class Limit:
    """The bare Redis work of ``ticks`` ticks, and what it left in Redis
    (ledger entries, queued messages, history entries) before it was
    deleted."""

    ticks: int
    seconds: float
    ledger: int
    queued: int
    history: int

    @property
    def rate(self) -> float:
        """Ticks per second."""
        return self.ticks / self.seconds

    @property
    def ms(self) -> float:
        """The whole work, ms."""
        return self.seconds * 1000


def _batches(schedules: int, ticks_each: int, first_tick_ms: int) -> Iterator[list[bytes | str | int]]:
    """Script arguments per batch of :data:`BATCH` ticks, every schedule's
    ticks in turn (as a catch-up or a burst decides them)."""
    body: dict[str, bytes] = {}
    batch: list[bytes | str | int] = []
    for s in range(schedules):
        schedule = schedules_for_actor(
            f"job{s}", "default", "* * * * * *", timezone="UTC", catch_up="each", catch_up_window=0
        )[0]
        sid = schedule.id
        for k in range(ticks_each):
            tick = first_tick_ms + k * 1000
            if sid not in body:
                body[sid] = message_for(schedule, tick, prefix="limit", timestamp_ms=tick).encode()
            batch += [sid, tick, message_id_for(sid, tick, prefix="limit"), body[sid]]
            if len(batch) >= 4 * BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def bare_work(
    client: redis.Redis, *, schedules: int, ticks_each: int = 1, history_length: int = 10_000, reps: int = 1
) -> Limit:
    """Time the bare Redis work of ``schedules`` x ``ticks_each`` ticks in
    batches of :data:`BATCH` (the median of ``reps`` repetitions), then
    delete what it wrote.  Only the script calls are timed."""
    keys = Keys("limit")
    script = client.register_script(_SCRIPT)
    script_keys = [keys.ticks, keys.history, QUEUE, f"{QUEUE}.msgs"]
    first = 1_800_000_000_000
    script(keys=script_keys, args=[history_length])  # loaded before the clock starts
    took = []
    written = 0
    for _ in range(reps):
        client.delete(*script_keys)
        seconds = 0.0
        written = 0
        for args in _batches(schedules, ticks_each, first):
            started = time.perf_counter()
            written += int(script(keys=script_keys, args=[history_length, *args]))
            seconds += time.perf_counter() - started
        took.append(seconds)
    pipe = client.pipeline()
    pipe.hlen(keys.ticks).llen(QUEUE).xlen(keys.history).delete(*script_keys)
    ledger, queued, history, _ = pipe.execute()
    return Limit(ticks=written, seconds=statistics.median(took), ledger=ledger, queued=queued, history=history)


def bare_reads(client: redis.Redis, keys: Keys, *, reps: int = 3) -> Limit:
    """The physical limit of a takeover with runtime schedules: the bare
    reads of every stored definition (``HSCAN`` of the runtime hash, pages
    of 1,000) and of their ledger entries and shapes (``HMGET`` of 5,000
    ids, four to a pipeline), nothing decoded or bound.  The median of
    ``reps``; ``ticks`` is the number of definitions read."""
    took = []
    ids: list[bytes] = []
    for _ in range(reps):
        started = time.perf_counter()
        ids = [field for field, _ in client.hscan_iter(keys.runtime, count=1000)]
        pipe = client.pipeline(transaction=False)
        for at in range(0, len(ids), 5000):
            chunk = ids[at : at + 5000]
            pipe.hmget(keys.ticks, chunk).hmget(keys.shapes, chunk)
            if len(pipe) >= 8:
                pipe.execute()
        pipe.execute()
        took.append(time.perf_counter() - started)
    return Limit(ticks=len(ids), seconds=statistics.median(took), ledger=0, queued=0, history=0)


def round_trip_us(client: redis.Redis, commands: Iterable[Sequence[object]]) -> float:
    """The median time of each command sent alone and its reply read, us:
    the limit of anything that needs that one round trip."""
    took = []
    for command in commands:
        started = time.perf_counter()
        client.execute_command(*command)
        took.append((time.perf_counter() - started) * 1e6)
    return statistics.median(took)


def bare_hset(client: redis.Redis, key: str, values: Iterable[tuple[str, str | bytes]], *, chunk: int = 1000) -> float:
    """Seconds to write ``values`` into the hash ``key``, ``chunk`` fields
    to an ``HSET``, pipelined (the limit of a bulk add); deleted after."""
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    mapping: dict[str, str | bytes] = {}
    for field, value in values:
        mapping[field] = value
        if len(mapping) >= chunk:
            pipe.hset(key, mapping=mapping)
            mapping = {}
    if mapping:
        pipe.hset(key, mapping=mapping)
    pipe.execute()
    seconds = time.perf_counter() - started
    client.delete(key)
    return seconds


def ratio(figure: float, limit: float) -> str:
    """``figure`` as a multiple of ``limit``, for printing beside it."""
    return f"{figure / limit:,.1f}x limit" if limit > 0 else "x limit: n/a"


def main() -> None:
    from tests.support.redis_server import RedisServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=1, help="ticks of each schedule")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with RedisServer() as server:
        client = server.client()
        limit = bare_work(client, schedules=args.schedules, ticks_each=args.ticks, reps=args.reps)
        client.close()
    print(f"bare Redis work of {limit.ticks:,} ticks: {limit.ms:.1f} ms = {limit.rate:,.0f} ticks/s")


if __name__ == "__main__":
    main()
