"""Reading and steering the scheduler from outside the workers.

What an operator (or the ``dramatiq-cron`` command) asks of the scheduler
goes through here: who leads and until when, which candidates were seen,
each schedule's last decided tick, the history stream, and the paused set.
Nothing here needs the lease: pausing is a set the leader's fenced claim
consults, and a manual trigger is an ordinary message plus a history entry,
so none of it can disturb the ledger's exactly-once decisions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis

from .keys import Keys
from .protocol import ClaimResult, Outcome, parse_ledger_value

__all__ = ["Candidate", "Control", "HistoryEntry", "LastDecision", "LeaderInfo"]

# Append a manual trigger to the history with the server's clock, so its
# time sorts with the leader's entries whatever the operator's clock says.
_RECORD_TRIGGER = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('HGET', KEYS[2], 'epoch') or ''
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
           'schedule', ARGV[2], 'tick', ARGV[3], 'outcome', ARGV[4], 'at', now,
           'epoch', epoch, 'detail', ARGV[5], 'message_id', ARGV[6])
return now
"""

# The per-entry claim results stored in the ledger, as outcomes.  A fired
# tick may also have been a catch-up; the history stream tells which.
_RESULT_OUTCOMES: dict[int | None, str] = {
    ClaimResult.FIRE: Outcome.FIRED,
    ClaimResult.RECORDED: Outcome.MISSED,
    ClaimResult.SKIPPED: Outcome.SKIPPED,
    ClaimResult.PAUSED: Outcome.PAUSED,
}

# How far back ``last_decisions`` looks in the stream for the precise
# outcome of each schedule's last tick.
_RECENT = 1000


@dataclasses.dataclass(frozen=True)
class LeaderInfo:
    """The lease as Redis holds it."""

    host: str
    pid: int
    epoch: int
    since_ms: int
    renewed_ms: int
    ttl_ms: int
    remaining_ms: int
    candidate: str


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A process that competed for (or renewed) the lease recently."""

    host: str
    pid: int
    candidate_id: str
    seen_ms: int


@dataclasses.dataclass(frozen=True)
class LastDecision:
    """A schedule's entry in the ledger: its last decided tick."""

    tick_ms: int
    epoch: int
    outcome: str


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """One entry of the history stream."""

    entry_id: str
    schedule_id: str
    tick_ms: int
    outcome: str
    at_ms: int
    epoch: int | None
    detail: str
    message_id: str

    @property
    def actor_name(self) -> str:
        """The actor part of the schedule id (``actor/name@zone``)."""
        return self.schedule_id.split("/", 1)[0]


class Control:
    """Read and steer one scheduler (one key prefix) in Redis.

    Parameters:
      client: A client with short timeouts and ``decode_responses=True``
        (see :func:`~dramatiq_cron_middleware.connection.scheduler_clients`).
      keys: The scheduler's key names.
      history_length: Approximate cap of the history stream, honoured when
        a manual trigger is appended.
    """

    def __init__(self, *, client: redis.Redis, keys: Keys, history_length: int = 10_000) -> None:
        self.client = client
        self.keys = keys
        self.history_length = history_length
        self._record_trigger = client.register_script(_RECORD_TRIGGER)

    def server_ms(self) -> int:
        """Redis server time in epoch milliseconds (the scheduler's clock)."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def leader(self) -> LeaderInfo | None:
        """The current lease holder, or None when the lease is free."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.keys.lease)
        pipe.pttl(self.keys.lease)
        fields, remaining = pipe.execute()
        if not fields or "token" not in fields:
            return None
        return LeaderInfo(
            host=fields.get("host", "?"),
            pid=int(fields.get("pid", 0)),
            epoch=int(fields.get("epoch", 0)),
            since_ms=int(fields.get("since", 0)),
            renewed_ms=int(fields.get("renewed", 0)),
            ttl_ms=int(fields.get("ttl", 0)),
            remaining_ms=max(int(remaining), 0),
            candidate=fields.get("candidate", ""),
        )

    def candidates(self, *, since_ms: int) -> list[Candidate]:
        """Candidates seen at or after ``since_ms`` (server time), newest first."""
        out = []
        seen: Any = self.client.zrevrangebyscore(self.keys.candidates, "+inf", since_ms, withscores=True)
        for member, score in seen:
            host, _, rest = str(member).rpartition("|")
            host, _, pid = host.rpartition("|")
            out.append(Candidate(host=host, pid=int(pid or 0), candidate_id=rest, seen_ms=int(score)))
        return out

    def last_decisions(self) -> dict[str, LastDecision]:
        """Every schedule's last decided tick, with the outcome taken from
        the recent history where it is still there."""
        raw: Any = self.client.hgetall(self.keys.ticks)
        precise: dict[tuple[str, int], str] = {}
        for entry in self.history(limit=_RECENT):
            precise.setdefault((entry.schedule_id, entry.tick_ms), entry.outcome)
        out = {}
        for sid, value in raw.items():
            parsed = parse_ledger_value(value)
            if parsed is None:
                continue  # unparsable: the leader replaces it with a baseline
            fallback = "baseline" if parsed.baseline else _RESULT_OUTCOMES.get(parsed.result, "unknown")
            outcome = precise.get((sid, parsed.tick_ms), fallback)
            out[sid] = LastDecision(tick_ms=parsed.tick_ms, epoch=parsed.epoch, outcome=str(outcome))
        return out

    def history(self, *, limit: int, match: set[str] | None = None) -> list[HistoryEntry]:
        """The newest ``limit`` history entries, newest first; with ``match``,
        only those whose schedule id or actor name is in it."""
        out: list[HistoryEntry] = []
        upper = "+"
        page = limit if match is None else max(limit, 500)
        while len(out) < limit:
            rows: Any = self.client.xrevrange(self.keys.history, max=upper, min="-", count=page)
            for entry_id, fields in rows:
                entry = _entry(entry_id, fields)
                if match is None or entry.schedule_id in match or entry.actor_name in match:
                    out.append(entry)
                    if len(out) == limit:
                        break
            if len(rows) < page:
                break
            upper = "(" + rows[-1][0]
        return out

    def paused(self) -> set[str]:
        """Paused actor names and schedule ids."""
        members: Any = self.client.smembers(self.keys.paused)
        return set(members)

    def pause(self, target: str) -> bool:
        """Pause an actor (every schedule of it) or one schedule id; the
        leader records its ticks as paused.  False if it already was."""
        return bool(self.client.sadd(self.keys.paused, target))

    def resume(self, target: str) -> bool:
        """Undo :meth:`pause`.  False if it was not paused."""
        return bool(self.client.srem(self.keys.paused, target))

    def record_trigger(self, *, schedule_id: str, tick_ms: int, message_id: str) -> int:
        """Append a manual trigger to the history; returns its server time.
        The ledger is left alone, so the schedule fires as before."""
        args: list[Any] = [self.history_length, schedule_id, tick_ms, Outcome.TRIGGERED, "manual", message_id]
        return int(self._record_trigger(keys=[self.keys.history, self.keys.lease], args=args))


def _entry(entry_id: str, fields: dict[str, str]) -> HistoryEntry:
    epoch = fields.get("epoch", "")
    return HistoryEntry(
        entry_id=entry_id,
        schedule_id=fields.get("schedule", ""),
        tick_ms=int(fields.get("tick", 0)),
        outcome=fields.get("outcome", ""),
        at_ms=int(fields.get("at", 0)),
        epoch=int(epoch) if epoch.isdigit() else None,
        detail=fields.get("detail", ""),
        message_id=fields.get("message_id", ""),
    )
