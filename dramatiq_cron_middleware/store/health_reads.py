"""The operators' reads of run monitoring in Redis: for each schedule the
health the leader stored, its ledger entry and its last run record; and one
schedule's run records.  Values come back as stored (text, or None when
absent): ``monitoring/read.py`` decides from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from .keys import Keys

__all__ = ["HealthReads", "HealthRow"]

#: One schedule's stored health facts, ledger entry and last run record.
HealthRow = tuple[Any, Any, Any]


class HealthReads:
    """Reads of one scheduler's run monitoring (one key prefix).

    Parameters:
      client: A client with short timeouts and ``decode_responses=True``
        (see :func:`~dramatiq_cron_middleware.store.connection.scheduler_clients`).
      keys: The scheduler's key names.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def server_ms(self) -> int:
        """The server's time in epoch ms (the scheduler's clock)."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def rows(self, schedule_ids: Sequence[str]) -> list[HealthRow]:
        """The stored facts, ledger entry and last run of each schedule, in
        their order: three HMGETs in one round trip (no transaction)."""
        ids = list(schedule_ids)
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.health, ids)
        pipe.hmget(self.keys.ticks, ids)
        pipe.hmget(self.keys.runs_last, ids)
        facts, ledger, last = pipe.execute()
        return list(zip(facts, ledger, last, strict=True))

    def pauses(self, now_ms: int) -> dict[str, int | None]:
        """The live pauses at ``now_ms``: paused-set member -> the instant
        (epoch ms) it ends, or None for a pause until resumed; a pause whose
        end has passed is not one, whether or not the leader removed it yet."""
        pipe = self.client.pipeline(transaction=True)
        pipe.smembers(self.keys.paused)
        pipe.hgetall(self.keys.paused_until)
        members, expiries = pipe.execute()
        out: dict[str, int | None] = {}
        for member in members:
            text = str(expiries.get(member, ""))
            expiry = int(text) if text.isdigit() else None
            if expiry is None or expiry > now_ms:
                out[str(member)] = expiry
        return out

    def runs(self, schedule_id: str, *, limit: int) -> list[Any]:
        """The newest ``limit`` run records of a schedule, newest first (at
        most the ``run_history`` kept), as stored."""
        ticks: Any = self.client.zrevrange(self.keys.runs_order(schedule_id), 0, max(limit, 1) - 1)
        if not ticks:
            return []
        values: Any = self.client.hmget(self.keys.runs(schedule_id), list(ticks))
        return [v for v in values if v is not None]
