"""Run monitoring's storage in Redis: run records, the run events, the open
runs, the health the leader decided and the alert outbox (the key names
and lifetimes are in keys.py and docs/design.md).

Four scripts, one round trip each: ``run_record`` (a worker's start or
finish), ``run_alive`` (a worker's heartbeat for the runs it is running),
``health_read`` (what the leader decides from) and the fenced
``health_write`` (its decisions and their alerts, atomically).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import redis

from .codes import decode, load_script
from .keys import Keys

__all__ = ["ALIVE_MS", "OUTBOXES", "HealthRead", "HealthWrite", "RedisRuns", "RunEvent"]


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """A run's start or finish, as the events stream holds it."""

    entry_id: str
    kind: str  # "start" or "finish"
    schedule_id: str
    tick_ms: int
    outcome: str
    at_ms: int
    error: str | None


@dataclasses.dataclass(frozen=True)
class HealthRead:
    """What the leader decides health from: the store's time, the events
    after the cursor (oldest first), the open runs past their deadline
    (``(member, deadline)``), the earliest deadline still ahead, and the
    stored facts of every schedule named."""

    now_ms: int
    cursor: str
    events: list[RunEvent]
    due: list[tuple[str, int]]
    facts: dict[str, str]
    next_deadline_ms: int | None = None
    #: The due running members whose worker's heartbeat has not lapsed:
    #: member -> when it lapses (ms).
    alive: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class HealthWrite:
    """The leader's decisions of one turn (see ``health_write.lua``).

    ``runs`` are ``(schedule id, tick ms, "pending" or "lost")``: a pending
    record for a fired tick that has none, a running one marked lost.
    """

    cursor: str | None
    facts: dict[str, str]
    add: dict[str, int]
    remove: list[str]
    runs: list[tuple[str, int, str]]
    alerts: list[str]
    #: The outboxes the alerts go to (:data:`OUTBOXES`).
    outboxes: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.facts or self.add or self.remove or self.runs or self.alerts) and self.cursor is None


#: How many alerts an outbox keeps at most (the oldest go first).
ALERTS_CAP = 10_000
#: The alert outboxes, one per sink that may fail or be slow, in the order
#: of their keys (monitoring/alerts.py delivers each on its own).
OUTBOXES = ("on_alert", "webhook")
#: How long a run counts as alive after its start or a heartbeat of its
#: worker, ms (workers beat every ``ALIVE_MS / 4``).
ALIVE_MS = 20_000


class RedisRuns:
    """Run monitoring's storage on one Redis.

    Parameters:
      client: A client with short timeouts and ``decode_responses=True``.
      keys: The key names.
      run_history: Runs kept per schedule.
      events_length: Approximate cap of the events stream.
      blocking_client: For :meth:`wait_for_event` (a socket timeout longer
        than the wait).  Defaults to None: no waiting (it returns at once).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        run_history: int,
        events_length: int,
        blocking_client: redis.Redis | None = None,
    ) -> None:
        self.client = client
        self.blocking_client = blocking_client
        self.keys = keys
        self.run_history = run_history
        self.events_length = events_length
        self._record = load_script(client, "run_record")
        self._alive = load_script(client, "run_alive")
        self._read = load_script(client, "health_read")
        self._write = load_script(client, "health_write")

    def record_run(
        self,
        mode: str,
        schedule_id: str,
        tick_ms: int,
        *,
        attempt: int,
        token: str,
        host: str,
        pid: int,
        outcome: str = "",
        error: str = "",
    ) -> bool:
        """A worker's ``"start"`` or ``"finish"`` of a run; False when the
        record belongs to another delivery (a duplicate, a newer attempt)."""
        keys = self.keys
        reply = self._record(
            keys=[
                keys.runs(schedule_id),
                keys.runs_order(schedule_id),
                keys.runs_last,
                keys.run_events,
                keys.runs_alive,
            ],
            args=[
                mode,
                schedule_id,
                tick_ms,
                attempt,
                token,
                host,
                pid,
                self.run_history,
                self.events_length,
                outcome,
                error,
                ALIVE_MS,
            ],
        )
        return decode(reply).ok

    def keep_alive(self, members: Sequence[str]) -> None:
        """A worker's heartbeat: the runs ``members`` (``r|<tick>|<id>``) are
        alive for :data:`ALIVE_MS` more."""
        if members:
            decode(self._alive(keys=[self.keys.runs_alive], args=[ALIVE_MS, *members]))

    def read_health(self, *, max_events: int, max_due: int, schedule_ids: Sequence[str] = ()) -> HealthRead:
        """See :class:`HealthRead`."""
        keys = self.keys
        reply = decode(
            self._read(
                keys=[keys.health_cursor, keys.run_events, keys.runs_open, keys.health, keys.runs_alive],
                args=[max_events, max_due, *schedule_ids],
            )
        )
        data: Any = json.loads(reply.payload[0])
        events = [_event(entry[0], entry[1]) for entry in (data.get("events") or [])]
        flat = data.get("due") or []
        due = [(str(flat[i]), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]
        facts = data.get("health") or {}
        later = data.get("next")
        alive = data.get("alive")
        return HealthRead(
            now_ms=reply.server_ms,
            cursor=str(data.get("cursor") or "0-0"),
            events=[e for e in events if e is not None],
            due=due,
            facts=dict(facts) if isinstance(facts, dict) else {},
            next_deadline_ms=None if later is None else int(later),
            alive={str(m): int(v) for m, v in alive.items()} if isinstance(alive, dict) else {},
        )

    def wait_for_event(self, cursor: str, timeout_ms: int) -> bool:
        """Block until an event after ``cursor`` exists or ``timeout_ms``
        passes (one blocking read); True when there is one."""
        if self.blocking_client is None or timeout_ms <= 0:
            return True
        found: Any = self.blocking_client.xread({self.keys.run_events: cursor}, count=1, block=timeout_ms)
        return bool(found)

    def write_health(self, token: str, write: HealthWrite) -> bool:
        """Apply ``write`` if the lease holds ``token``; False otherwise
        (nothing written)."""
        keys = self.keys
        extra: list[str] = []
        runs = []
        for schedule_id, tick, mark in write.runs:
            extra += [keys.runs(schedule_id), keys.runs_order(schedule_id)]
            runs.append([schedule_id, str(tick), mark, 7 + len(extra) - 1, 7 + len(extra)])
        body = {
            "cursor": write.cursor,
            "health": write.facts,
            "add": [[member, score] for member, score in write.add.items()],
            "remove": write.remove,
            "runs": runs,
            "alerts": write.alerts,
            "keep": self.run_history,
            "alerts_cap": ALERTS_CAP,
            "outboxes": [5 + OUTBOXES.index(o) for o in write.outboxes],
        }
        reply = self._write(
            keys=[
                keys.lease,
                keys.health,
                keys.health_cursor,
                keys.runs_open,
                keys.alerts,
                keys.alerts_webhook,
                keys.runs_last,
                *extra,
            ],
            args=[token, json.dumps(body)],
        )
        return decode(reply).ok

    def alerts(self, limit: int, *, outbox: str) -> list[str]:
        """The oldest ``limit`` alerts of an outbox (stored JSON)."""
        found: Any = self.client.lrange(self._outbox(outbox), 0, limit - 1)
        return [str(a) for a in found]

    def alert_delivered(self, alert: str, *, outbox: str) -> None:
        """Drop a delivered alert from an outbox."""
        self.client.lrem(self._outbox(outbox), 1, alert)

    def _outbox(self, outbox: str) -> str:
        return self.keys.alerts if OUTBOXES.index(outbox) == 0 else self.keys.alerts_webhook


def _event(entry_id: str, fields: list[str]) -> RunEvent | None:
    data = dict(zip(fields[::2], fields[1::2], strict=False))
    try:
        return RunEvent(
            entry_id=entry_id,
            kind=data["kind"],
            schedule_id=data["schedule"],
            tick_ms=int(data["tick"]),
            outcome=data.get("outcome", ""),
            at_ms=int(data["at"]),
            error=data.get("error") or None,
        )
    except (KeyError, ValueError):
        return None
