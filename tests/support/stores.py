"""Both store implementations behind one test harness, for the contract
suite (tests/store/test_contract.py): candidates on the store, the store's
time, and the faults and raw state a test sets up or checks.

The memory harness runs on a fake clock that only moves when told; the
Redis one on a real redis-server, whose time moves by itself (waiting for
it is a wait on the server's own clock reaching a target, with a deadline).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

import redis

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.monitoring.records import RunRecord, parse_run
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, bind_schedule
from dramatiq_cron_middleware.store.abc import OperatorStore, RunStore, RuntimeDefinitions, Store
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.durability import Durability
from dramatiq_cron_middleware.store.health_reads import HealthReads
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryOperator, MemoryRuns, MemoryRuntimeSchedules
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Candidate, Lease
from dramatiq_cron_middleware.store.ledger import BATCH_RECORD_MS, Claim, Ledger
from dramatiq_cron_middleware.store.operator import RedisOperator
from dramatiq_cron_middleware.store.redis_store import RedisStore
from dramatiq_cron_middleware.store.runs import RedisRuns
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.faults import FaultyServer
from tests.support.redis_server import RedisServer, replicas_online

__all__ = ["FakeTime", "MemoryHarness", "RedisHarness", "StoreHarness", "runtime_schedule"]

PREFIX = "contract"


@dataclasses.dataclass(frozen=True)
class Entry:
    """A history entry, as both stores hold it."""

    schedule_id: str
    tick_ms: int
    outcome: str
    epoch: str
    detail: str
    message_id: str


class FakeTime:
    """A wall and a monotonic clock that move only when told (ms)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        return self.ms

    def wall(self) -> float:
        return self.ms / 1000

    def monotonic(self) -> float:
        return self.ms / 1000 - 1_000_000_000


def runtime_schedule(actor: str, expression: str | Schedule, name: str) -> BoundSchedule:
    """A runtime schedule bound as ``RuntimeSchedules.add`` binds it."""
    item = dataclasses.replace(expression, name=name) if isinstance(expression, Schedule) else Schedule(expression)
    return bind_schedule(
        actor,
        "default",
        dataclasses.replace(item, name=name),
        timezone="UTC",
        catch_up="each",
        catch_up_window=300_000,
        source="runtime",
    )


def _any_actor(actor: object) -> ActorInfo:
    return ActorInfo(actor_name=str(actor), queue_name="default")


class StoreHarness:
    """What the contract tests need of either store."""

    name = ""

    def candidate(
        self, name: str, *, ttl_ms: int = 2000, fingerprint: str = "", version: str = "", replicas: int = 0
    ) -> Store:
        raise NotImplementedError

    def attach_replica(self) -> None:
        """From now on one replica acknowledges every write."""
        raise NotImplementedError

    def now_ms(self) -> int:
        """The store's time."""
        raise NotImplementedError

    def pass_time(self, ms: int) -> None:
        """Return once the store's time has moved ``ms`` on."""
        raise NotImplementedError

    def ledger_value(self, schedule_id: str) -> str | None:
        raise NotImplementedError

    def set_ledger_value(self, schedule_id: str, value: str) -> None:
        raise NotImplementedError

    def delete_lease(self) -> None:
        raise NotImplementedError

    def delete_epoch(self) -> None:
        """Lose the epoch counter alone."""
        raise NotImplementedError

    def pause(self, member: str, *, until_ms: int | None = None) -> None:
        raise NotImplementedError

    def paused(self) -> set[str]:
        """The paused set's members."""
        raise NotImplementedError

    def is_running(self, schedule_id: str) -> bool:
        raise NotImplementedError

    def set_batch_record(self, batch_id: str, value: str) -> None:
        raise NotImplementedError

    def history(self) -> list[Entry]:
        """Every history entry, oldest first."""
        raise NotImplementedError

    def add_runtime(self, actor: str, expression: str | Schedule, name: str) -> BoundSchedule:
        """Create or replace a runtime schedule; returns it as stored."""
        raise NotImplementedError

    def remove_runtime(self, actor: str, name: str) -> bool:
        raise NotImplementedError

    def flushall(self) -> None:
        raise NotImplementedError

    def claim_reply_lost(self, store: Store, token: str, epoch: int, batch_id: str, claims: Sequence[Claim]) -> None:
        """Send a claim that runs but whose reply the caller never reads."""
        raise NotImplementedError

    def run_store(self, *, run_history: int = 100) -> RunStore:
        """Run monitoring's storage on this store."""
        raise NotImplementedError

    def operator(self, *, history_length: int = 10_000) -> OperatorStore:
        """The store's operator half."""
        raise NotImplementedError

    def definitions(self) -> RuntimeDefinitions:
        """The runtime definitions as operators write them (any actor name is declared)."""
        raise NotImplementedError

    def runs(self, schedule_id: str) -> list[RunRecord]:
        """A schedule's run records, newest first."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class MemoryHarness(StoreHarness):
    name = "memory"

    def __init__(self) -> None:
        self.time = FakeTime()
        self.server = FaultyServer(now_ms=self.time.now_ms)

    def candidate(
        self, name: str, *, ttl_ms: int = 2000, fingerprint: str = "", version: str = "", replicas: int = 0
    ) -> Store:
        clock = ServerClock(monotonic=self.time.monotonic, wall=self.time.wall)
        return InMemoryStore(
            self.server,
            clock=clock,
            ttl_ms=ttl_ms,
            candidate=Candidate(host=name, pid=os.getpid(), fingerprint=fingerprint, version=version),
            durability=Durability(replicas=replicas),
        )

    def attach_replica(self) -> None:
        self.server.replicas_acking = 1

    def now_ms(self) -> int:
        return self.time.ms

    def pass_time(self, ms: int) -> None:
        self.time.ms += ms

    def ledger_value(self, schedule_id: str) -> str | None:
        return self.server.ticks.get(schedule_id)

    def set_ledger_value(self, schedule_id: str, value: str) -> None:
        self.server.ticks[schedule_id] = value

    def delete_lease(self) -> None:
        self.server.delete_lease()

    def delete_epoch(self) -> None:
        self.server.epoch = None

    def pause(self, member: str, *, until_ms: int | None = None) -> None:
        self.server.paused.add(member)
        if until_ms is not None:
            self.server.paused_until[member] = until_ms

    def paused(self) -> set[str]:
        return set(self.server.paused)

    def is_running(self, schedule_id: str) -> bool:
        return self.server.is_running(schedule_id)

    def set_batch_record(self, batch_id: str, value: str) -> None:
        # A stray write (a bad restore): the record as is, for its usual life.
        self.server.batches[batch_id] = (value, self.server.now_ms() + BATCH_RECORD_MS)

    def history(self) -> list[Entry]:
        return [
            Entry(h.schedule_id, h.tick_ms, h.outcome, "" if h.epoch is None else str(h.epoch), h.detail, h.message_id)
            for h in self.server.history
        ]

    def add_runtime(self, actor: str, expression: str | Schedule, name: str) -> BoundSchedule:
        return self.server.add_runtime([runtime_schedule(actor, expression, name)])[0]

    def remove_runtime(self, actor: str, name: str) -> bool:
        return self.server.remove_runtime(f"{actor}:{name}")

    def flushall(self) -> None:
        self.server.flushall()

    def run_store(self, *, run_history: int = 100) -> RunStore:
        self._runs = MemoryRuns(self.server, run_history=run_history)
        return self._runs

    def operator(self, *, history_length: int = 10_000) -> OperatorStore:
        return MemoryOperator(self.server, history_length=history_length, prefix=PREFIX)

    def definitions(self) -> RuntimeDefinitions:
        if not hasattr(self, "_definitions"):
            self._definitions = MemoryRuntimeSchedules(self.server, resolve_actor=_any_actor)
        return self._definitions

    def runs(self, schedule_id: str) -> list[RunRecord]:
        found = (parse_run(schedule_id, text) for text in MemoryRuns(self.server).runs_of(schedule_id))
        return [run for run in found if run is not None]

    def claim_reply_lost(self, store: Store, token: str, epoch: int, batch_id: str, claims: Sequence[Claim]) -> None:
        self.server.lose_reply("claim")
        try:
            store.ledger.claim(token, epoch, batch_id, claims)
        except TimeoutError:
            return
        raise AssertionError("the injected lost reply did not raise TimeoutError")


class RedisHarness(StoreHarness):
    name = "redis"

    def __init__(self, server: RedisServer, *, protocol: int | None = None) -> None:
        """``protocol``: the RESP version every client of the harness
        speaks (2 or 3); None, redis-py's default (3 since redis-py 8)."""
        self.server = server
        self.url = server.url + (f"?protocol={protocol}" if protocol else "")
        self.client = server.client(protocol=protocol) if protocol else server.client()
        self.client.flushall()
        self.keys = Keys(PREFIX)
        self._clients: list[redis.Redis] = [self.client]
        self._replica: RedisServer | None = None

    def candidate(
        self, name: str, *, ttl_ms: int = 2000, fingerprint: str = "", version: str = "", replicas: int = 0
    ) -> Store:
        client, blocking = scheduler_clients(self.url, op_timeout_ms=1000, block_timeout_ms=ttl_ms)
        self._clients += [client, blocking]
        clock = ServerClock()
        lease = Lease(
            client=client,
            blocking_client=blocking,
            keys=self.keys,
            ttl_ms=ttl_ms,
            clock=clock,
            candidate=Candidate(name, os.getpid(), fingerprint=fingerprint, version=version),
            durability=Durability(replicas=replicas, wait_ms=500),  # half the op timeout, as Timing has it
        )
        ledger = Ledger(client=client, keys=self.keys, clock=clock, durability=lease.durability)
        return RedisStore(lease=lease, ledger=ledger, runtime=self._runtime())

    def attach_replica(self) -> None:
        self._replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(self.server.port)]).start()
        replica = self._replica.client()
        self._clients.append(replica)
        deadline = time.monotonic() + 10
        while replicas_online(self.client) < 1:
            if time.monotonic() > deadline:
                raise AssertionError("the replica did not sync within 10 s")
            time.sleep(0.02)

    def _runtime(self) -> RuntimeSchedules:
        return RuntimeSchedules(self.client, self.keys, resolve_actor=_any_actor)

    def now_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def pass_time(self, ms: int) -> None:
        target = self.now_ms() + ms
        deadline = time.monotonic() + ms / 1000 + 10
        while self.now_ms() < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Redis server's clock did not move {ms} ms on")
            time.sleep(min(0.01, ms / 1000))

    def ledger_value(self, schedule_id: str) -> str | None:
        value: Any = self.client.hget(self.keys.ticks, schedule_id)
        return value

    def set_ledger_value(self, schedule_id: str, value: str) -> None:
        self.client.hset(self.keys.ticks, schedule_id, value)

    def delete_lease(self) -> None:
        self.client.delete(self.keys.lease)

    def delete_epoch(self) -> None:
        self.client.delete(self.keys.epoch)

    def pause(self, member: str, *, until_ms: int | None = None) -> None:
        self.client.sadd(self.keys.paused, member)
        if until_ms is not None:
            self.client.hset(self.keys.paused_until, member, until_ms)

    def paused(self) -> set[str]:
        return {str(m) for m in self.client.smembers(self.keys.paused)}

    def is_running(self, schedule_id: str) -> bool:
        return bool(self.client.exists(self.keys.running(schedule_id)))

    def set_batch_record(self, batch_id: str, value: str) -> None:
        self.client.set(self.keys.batch(batch_id), value, px=600_000)

    def history(self) -> list[Entry]:
        rows: Any = self.client.xrange(self.keys.history)
        return [
            Entry(f["schedule"], int(f["tick"]), f["outcome"], f["epoch"], f["detail"], f["message_id"])
            for _, f in rows
        ]

    def add_runtime(self, actor: str, expression: str | Schedule, name: str) -> BoundSchedule:
        return self._runtime().add(actor, expression, name=name).schedule

    def remove_runtime(self, actor: str, name: str) -> bool:
        return self._runtime().remove(actor, name)

    def flushall(self) -> None:
        self.client.flushall()

    def claim_reply_lost(self, store: Store, token: str, epoch: int, batch_id: str, claims: Sequence[Claim]) -> None:
        store.ledger.claim(token, epoch, batch_id, claims)  # it ran; the reply is dropped unread

    def run_store(self, *, run_history: int = 100) -> RunStore:
        client, _ = scheduler_clients(self.url, op_timeout_ms=1000, block_timeout_ms=0)
        self._clients.append(client)
        return RedisRuns(client, self.keys, run_history=run_history, events_length=10_000)

    def operator(self, *, history_length: int = 10_000) -> OperatorStore:
        return RedisOperator(client=self.client, keys=self.keys, history_length=history_length)

    def definitions(self) -> RuntimeDefinitions:
        return self._runtime()

    def runs(self, schedule_id: str) -> list[RunRecord]:
        client, _ = scheduler_clients(self.url, op_timeout_ms=1000, block_timeout_ms=0)
        self._clients.append(client)
        return read_runs(client, self.keys, schedule_id)

    def close(self) -> None:
        for client in self._clients:
            client.close()
        if self._replica is not None:
            self._replica.close()


def read_runs(client: redis.Redis, keys: Keys, schedule_id: str, *, limit: int = 100) -> list[RunRecord]:
    """The newest ``limit`` runs of a schedule in Redis, newest first, read
    with ``client`` (decoding responses) outside any service."""
    runs = (parse_run(schedule_id, v) for v in HealthReads(client, keys).runs(schedule_id, limit=limit))
    return [run for run in runs if run is not None]
