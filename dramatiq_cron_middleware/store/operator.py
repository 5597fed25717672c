"""The store's operator half on Redis: what an operator reads (the lease,
the candidates, the ledger's decisions, the history) and writes (pauses,
the audit trail, backfill claims), for the service (service.py) and the
read-only pages; :class:`~.in_memory.MemoryOperator` is the same in memory.

Nothing here needs the lease: a pause is a set the leader's fenced claim
consults, an audit entry and a manual trigger are history entries, and a
backfill claims its ticks in marks of its own, so none of it can disturb
the ledger's exactly-once decisions.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from ..schedules.ids import parse_id
from ..schedules.outcome import Outcome
from ..times import span
from .codes import RESULT_OUTCOMES, ClaimResult, Status, decode, load_script, parse_ledger_value
from .keys import Keys
from .lease import parse_schedule_set

__all__ = [
    "ReplicasLacking",
    "replicas_lacking",
    "Candidate",
    "ForeignLock",
    "HistoryEntry",
    "HistoryPage",
    "LastDecision",
    "LeaderInfo",
    "RedisOperator",
    "decision_of",
    "entry_actor",
]

# How far back ``last_decisions`` looks in the history for the precise
# outcome of each schedule's last tick.
RECENT = 1000


@dataclasses.dataclass(frozen=True)
class LeaderInfo:
    """The lease as the store holds it."""

    host: str
    pid: int
    epoch: int
    since_ms: int
    renewed_ms: int
    ttl_ms: int
    remaining_ms: int
    candidate: str

    @classmethod
    def of(cls, fields: dict[str, Any], remaining_ms: int) -> LeaderInfo | None:
        """From the lease's fields (None: no lease)."""
        if not fields or "token" not in fields:
            return None
        return cls(
            host=fields.get("host", "?"),
            pid=int(fields.get("pid", 0)),
            epoch=int(fields.get("epoch", 0)),
            since_ms=int(fields.get("since", 0)),
            renewed_ms=int(fields.get("renewed", 0)),
            ttl_ms=int(fields.get("ttl", 0)),
            remaining_ms=max(int(remaining_ms), 0),
            candidate=fields.get("candidate", ""),
        )


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A process that competed for (or renewed) the lease recently."""

    host: str
    pid: int
    candidate_id: str
    seen_ms: int
    #: The digest of the candidate's declared schedule set ("" if unknown):
    #: candidates running the same code share it.
    fingerprint: str = ""
    #: The candidate's ``app_version`` ("" if none).
    version: str = ""

    @classmethod
    def of(cls, member: str, seen_ms: int, info: str = "") -> Candidate:
        """From a candidates member ``host|pid|id`` and its info ``fingerprint|version``."""
        host, _, rest = member.rpartition("|")
        host, _, pid = host.rpartition("|")
        fingerprint, _, version = info.partition("|")
        return cls(host, int(pid) if pid.isdigit() else 0, rest, int(seen_ms), fingerprint, version)


@dataclasses.dataclass(frozen=True)
class ForeignLock:
    """Another scheduler's lock key as the store holds it: its value (the
    holder's token; None: no such key), its PTTL in ms (-1: no expiry, -2:
    no key), and whether this call deleted it."""

    holder: str | None
    pttl_ms: int
    deleted: bool = False


@dataclasses.dataclass(frozen=True)
class LastDecision:
    """A schedule's entry in the ledger: its last decided tick."""

    tick_ms: int
    epoch: int
    outcome: str


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """One entry of the history."""

    entry_id: str
    schedule_id: str
    tick_ms: int
    outcome: str
    at_ms: int
    epoch: int | None
    detail: str
    message_id: str
    #: Who did an operator action (``api``, ``cli``, a dashboard user);
    #: "" for the leader's tick outcomes.
    who: str = ""

    @property
    def actor_name(self) -> str:
        """The actor part of the schedule id."""
        return entry_actor(self.schedule_id)

    @property
    def lag_ms(self) -> int | None:
        """The fire lag (claim time minus tick) of a tick that fired, else None."""
        fired = self.outcome in (Outcome.FIRED, Outcome.CAUGHT_UP) and self.detail.isdigit()
        return int(self.detail) if fired else None

    @classmethod
    def of(cls, entry_id: str, fields: dict[str, str]) -> HistoryEntry:
        """From a history stream entry."""
        epoch = fields.get("epoch", "")
        return cls(
            entry_id=entry_id,
            schedule_id=fields.get("schedule", ""),
            tick_ms=int(fields.get("tick", 0) or 0),
            outcome=fields.get("outcome", ""),
            at_ms=int(fields.get("at", 0) or 0),
            epoch=int(epoch) if epoch.isdigit() else None,
            detail=fields.get("detail", ""),
            message_id=fields.get("message_id", ""),
            who=fields.get("who", ""),
        )


def entry_actor(schedule_id: str) -> str:
    """The actor part of a schedule id (``actor``, ``actor/name``,
    ``actor:name``) or of a whole actor's paused member (``actor:*``)."""
    if schedule_id.endswith(":*"):
        return schedule_id[:-2]
    return parse_id(schedule_id).actor


@dataclasses.dataclass(frozen=True)
class HistoryPage:
    """A slice of one schedule's history, newest first.

    ``older`` is the cursor for the next (older) slice, or None when the
    start of the history was reached; ``scanned`` is how many entries were
    read to find these.
    """

    entries: list[HistoryEntry]
    older: str | None
    scanned: int


def decision_of(value: object) -> LastDecision | None:
    """A ledger value as a decision; None when it does not parse (the
    leader replaces such a value with a baseline).  A fired tick shows as
    ``fired`` even when it was a catch-up (only the history tells)."""
    parsed = parse_ledger_value(value)
    if parsed is None:
        return None
    return LastDecision(tick_ms=parsed.tick_ms, epoch=parsed.epoch, outcome=outcome_of(parsed.result, parsed.baseline))


def outcome_of(result: int | None, baseline: bool = False) -> str:
    """A claim result stored in the ledger as an outcome."""
    if baseline:
        return "baseline"
    if result is None or result not in RESULT_OUTCOMES:
        return "unknown"
    return str(RESULT_OUTCOMES[ClaimResult(result)])


def precise(decided: dict[str, LastDecision], recent: Sequence[HistoryEntry]) -> dict[str, LastDecision]:
    """``decided`` with each outcome taken from the recent history (newest
    first) where the tick is still there."""
    found: dict[tuple[str, int], str] = {}
    for entry in recent:
        found.setdefault((entry.schedule_id, entry.tick_ms), entry.outcome)
    return {sid: dataclasses.replace(d, outcome=found.get((sid, d.tick_ms), d.outcome)) for sid, d in decided.items()}


def matches(entry: HistoryEntry, match: set[str] | None) -> bool:
    """Whether ``entry`` is one of ``match`` (schedule ids or actor names; None: all)."""
    return match is None or entry.schedule_id in match or entry.actor_name in match


@dataclasses.dataclass(frozen=True)
class ReplicasLacking:
    """A candidate whose writes too few Redis replicas acknowledged (so
    nothing fires): the record it refreshes at each retry."""

    host: str
    pid: int
    acked: int
    required: int
    since_ms: int
    at_ms: int
    #: Why a majority of the sentinels does not confirm them ("": the
    #: replicas fell short).
    sentinels: str = ""

    def describe(self, now_ms: int) -> str:
        """One line for people."""
        if self.sentinels:
            return (
                f"the writes of {self.host} pid {self.pid} are not confirmed by the sentinels ({self.sentinels}; "
                f"for {span(now_ms - self.since_ms)}): nothing fires until they are"
            )
        return (
            f"{self.acked} of {self.required} Redis replica(s) acknowledge the writes of {self.host} pid {self.pid} "
            f"(for {span(now_ms - self.since_ms)}): nothing fires until they do"
        )


def replicas_lacking(fields: dict[str, str]) -> ReplicasLacking | None:
    """A replicas record (``OperatorStore.replicas_record``) as read; None without one."""
    try:
        host, pid, _ = str(fields["member"]).split("|", 2)
        return ReplicasLacking(
            host=host,
            pid=int(pid),
            acked=int(fields["acked"]),
            required=int(fields["required"]),
            since_ms=int(fields["since"]),
            at_ms=int(fields["at"]),
            sentinels=str(fields.get("sentinels", "")),
        )
    except (KeyError, ValueError):
        return None


class RedisOperator:
    """The operator half of the store protocol (:class:`~.abc.OperatorStore`)
    on one scheduler's Redis.

    Parameters:
      client: A client with short timeouts and ``decode_responses=True``
        (see :func:`~.connection.scheduler_clients`).
      keys: The scheduler's key names.
      history_length: Approximate cap of the history stream, honoured by
        every entry written here.
    """

    def __init__(self, *, client: redis.Redis, keys: Keys, history_length: int = 10_000) -> None:
        self.client = client
        self.keys = keys
        self.history_length = history_length
        self._scripts: dict[str, Any] = {}

    def _script(self, name: str) -> Any:
        if name not in self._scripts:
            self._scripts[name] = load_script(self.client, name)
        return self._scripts[name]

    def server_ms(self) -> int:
        """The store's time in epoch ms (the scheduler's clock)."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # -- who leads --------------------------------------------------------------

    def leader(self) -> LeaderInfo | None:
        """The current lease holder, or None when the lease is free."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.keys.lease)
        pipe.pttl(self.keys.lease)
        fields, remaining = pipe.execute()
        return LeaderInfo.of(fields, remaining)

    def replicas_record(self) -> dict[str, str]:
        """The last record of a candidate whose writes lacked replicas ({}: none)."""
        fields: Any = self.client.hgetall(self.keys.replicas)
        return {str(k): str(v) for k, v in fields.items()}

    def candidates(self, *, since_ms: int) -> list[Candidate]:
        """Candidates seen at or after ``since_ms`` (store time), newest first."""
        seen: Any = self.client.zrevrangebyscore(self.keys.candidates, "+inf", since_ms, withscores=True)
        infos: Any = self.client.hmget(self.keys.candidate_info, [m for m, _ in seen]) if seen else []
        return [Candidate.of(str(m), int(s), str(i or "")) for (m, s), i in zip(seen, infos, strict=True)]

    def ineligible(self, *, since_ms: int) -> list[Candidate]:
        """Processes that may not lead (``lead=False``) seen at or after ``since_ms``."""
        seen: Any = self.client.zrevrangebyscore(self.keys.ineligible, "+inf", since_ms, withscores=True)
        return [Candidate.of(str(m), int(s)) for m, s in seen]

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        """The schedule sets the candidates published, by fingerprint."""
        values: Any = self.client.hmget(self.keys.candidate_sets, fingerprints) if fingerprints else []
        return {fp: parse_schedule_set(value) for fp, value in zip(fingerprints, values, strict=True)}

    def round_trip_ms(self) -> float:
        """One PING, timed on this process's monotonic clock, in ms."""
        started = time.monotonic()
        self.client.ping()
        return (time.monotonic() - started) * 1000

    def maxmemory_policy(self) -> str | None:
        """Redis's ``maxmemory-policy``, or None where ``CONFIG GET`` is refused."""
        try:
            reply: Any = self.client.config_get("maxmemory-policy")
        except redis.ResponseError:
            return None
        value = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
        return str(value) if value else None

    def foreign_lock(self, key: str, *, delete_if: str | None = None) -> ForeignLock:
        """Another scheduler's lock ``key`` (outside the prefix: a
        migration's leftover), deleted if its holder is ``delete_if``
        (compare-and-delete: WATCH, and again if it was touched meanwhile)."""
        for _ in range(3):
            with self.client.pipeline() as pipe:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                holder: Any = pipe.get(key)
                pttl = int(pipe.pttl(key))
                if holder is None or holder != delete_if:
                    return ForeignLock(holder, pttl)
                pipe.multi()
                pipe.delete(key)
                try:
                    pipe.execute()
                except redis.WatchError:
                    continue
            return ForeignLock(holder, pttl, deleted=True)
        return ForeignLock(holder, pttl)

    # -- the ledger and the history ----------------------------------------------

    def ledger_value(self, schedule_id: str) -> str | None:
        """A schedule's raw ledger value."""
        value: Any = self.client.hget(self.keys.ticks, schedule_id)
        return None if value is None else str(value)

    def decisions(self, schedule_ids: Sequence[str]) -> dict[str, LastDecision]:
        """The ledger entries of just these schedules."""
        if not schedule_ids:
            return {}
        values: Any = self.client.hmget(self.keys.ticks, list(schedule_ids))
        decided = {sid: decision_of(v) for sid, v in zip(schedule_ids, values, strict=True) if v}
        return {sid: d for sid, d in decided.items() if d is not None}

    def last_decisions(self) -> dict[str, LastDecision]:
        """Every schedule's last decided tick, with the outcome taken from
        the recent history where it is still there."""
        raw: Any = self.client.hgetall(self.keys.ticks)
        decided = {str(sid): decision_of(v) for sid, v in raw.items()}
        return precise({s: d for s, d in decided.items() if d is not None}, self.history(limit=RECENT))

    def history(self, *, limit: int, match: set[str] | None = None) -> list[HistoryEntry]:
        """The newest ``limit`` history entries, newest first; with ``match``,
        only those whose schedule id or actor name is in it."""
        out: list[HistoryEntry] = []
        upper = "+"
        page = limit if match is None else max(limit, 500)
        while len(out) < limit:
            rows: Any = self.client.xrevrange(self.keys.history, max=upper, min="-", count=page)
            out += [e for e in (HistoryEntry.of(i, f) for i, f in rows) if matches(e, match)]
            if len(rows) < page:
                break
            upper = "(" + rows[-1][0]
        return out[:limit]

    def schedule_history(
        self, schedule_id: str, *, limit: int, before: str | None = None, scan: int = 2500
    ) -> HistoryPage:
        """Up to ``limit`` history entries of one schedule, newest first,
        older than the entry id ``before`` (None: from the newest), reading
        at most about ``scan`` entries (the cursor carries on from there)."""
        out: list[HistoryEntry] = []
        cursor, scanned, chunk = before, 0, 500
        while scanned < scan:
            upper = "+" if cursor is None else "(" + cursor
            rows: Any = self.client.xrevrange(self.keys.history, max=upper, min="-", count=chunk)
            for entry_id, fields in rows:
                scanned += 1
                cursor = entry_id
                if fields.get("schedule") == schedule_id:
                    out.append(HistoryEntry.of(entry_id, fields))
                    if len(out) == limit:
                        return HistoryPage(entries=out, older=entry_id, scanned=scanned)
            if len(rows) < chunk:
                return HistoryPage(entries=out, older=None, scanned=scanned)
        return HistoryPage(entries=out, older=cursor, scanned=scanned)

    def history_since(self, start_ms: int) -> Iterator[HistoryEntry]:
        """Every history entry recorded at or after ``start_ms``, oldest first."""
        lower = f"{start_ms}-0"
        while True:
            rows: Any = self.client.xrange(self.keys.history, min=lower, max="+", count=1000)
            for entry_id, fields in rows:
                yield HistoryEntry.of(entry_id, fields)
            if len(rows) < 1000:
                return
            lower = "(" + str(rows[-1][0])

    def history_reach(self, start_ms: int) -> int | None:
        """How far back the history reaches, when it was trimmed after
        ``start_ms`` (None: it holds every entry since ``start_ms``)."""
        try:
            info: Any = self.client.xinfo_stream(self.keys.history)
        except redis.ResponseError:  # no stream yet: nothing was ever recorded
            return None
        length = int(info.get("length", -1))
        if info.get("entries-added") is not None:
            if int(info["entries-added"]) == length:
                return None  # never trimmed: Redis 7 says so
        elif 0 <= length < self.history_length:
            # Redis 6.2 does not count what was added; but every write caps
            # the stream at history_length (MAXLEN ~), and a trim leaves at
            # least that many entries: a shorter stream was never trimmed
            # (unless history_length was raised since: see design.md).
            return None
        first = info.get("first-entry")
        if not first:
            return None
        first_ms = int(str(first[0]).split("-", 1)[0])
        return first_ms if first_ms > start_ms else None

    def record(
        self,
        action: str,
        *,
        who: str,
        entries: Sequence[tuple[str, str]],
        tick_ms: int | None = None,
        message_id: str = "",
    ) -> int:
        """Append ``action`` by ``who`` on each ``(schedule id, detail)`` to the
        history, with the store's time and the lease's epoch; returns that time."""
        now = 0
        tick = "" if tick_ms is None else str(tick_ms)
        for first in range(0, len(entries), 500):
            args: list[Any] = [self.history_length, who]
            for schedule_id, detail in entries[first : first + 500]:
                args += [schedule_id, tick, action, detail, message_id]
            reply = self._script("audit")(keys=[self.keys.history, self.keys.lease], args=args)
            now = decode(reply).server_ms
        return now

    def run_records(self, schedule_id: str, *, limit: int) -> list[str]:
        """The newest ``limit`` run records of a schedule, newest first, as stored."""
        ticks: Any = self.client.zrevrange(self.keys.runs_order(schedule_id), 0, max(limit, 1) - 1)
        values: Any = self.client.hmget(self.keys.runs(schedule_id), list(ticks)) if ticks else []
        return [str(v) for v in values if v is not None]

    # -- pauses -------------------------------------------------------------------

    def pauses(self) -> dict[str, int | None]:
        """The live pauses: paused-set member -> the instant (epoch ms) it
        ends, or None for a pause until resumed."""
        pipe = self.client.pipeline(transaction=True)
        pipe.smembers(self.keys.paused)
        pipe.hgetall(self.keys.paused_until)
        members, expiries = pipe.execute()
        return live_pauses(members, expiries, self.server_ms() if expiries else 0)

    def paused(self) -> set[str]:
        """The paused set's live members (see :meth:`pauses`)."""
        return set(self.pauses())

    def set_pause(self, member: str, until_ms: int | None) -> bool:
        """Add ``member`` to the paused set, ending at ``until_ms`` (None:
        until resumed); False when it already was, with that end."""
        pipe = self.client.pipeline(transaction=True)
        pipe.sadd(self.keys.paused, member)
        pipe.hget(self.keys.paused_until, member)
        if until_ms is None:
            pipe.hdel(self.keys.paused_until, member)
        else:
            pipe.hset(self.keys.paused_until, member, str(until_ms))
        added, previous = pipe.execute()[:2]
        return bool(added) or (None if previous is None else str(previous)) != (
            None if until_ms is None else str(until_ms)
        )

    def clear_pause(self, member: str) -> bool:
        """Remove ``member`` from the paused set; False when it was not in it."""
        pipe = self.client.pipeline(transaction=True)
        pipe.srem(self.keys.paused, member)
        pipe.hdel(self.keys.paused_until, member)
        return bool(pipe.execute()[0])

    # -- backfill claims ------------------------------------------------------------

    def backfill_marks(self, schedule_id: str, ticks: Sequence[int]) -> dict[int, str]:
        """The backfill marks of these ticks: ``c|<run>`` claimed, ``e`` enqueued."""
        key = self.keys.backfilled(schedule_id)
        out: dict[int, str] = {}
        for first in range(0, len(ticks), 1000):
            chunk = ticks[first : first + 1000]
            values: Any = self.client.hmget(key, [str(t) for t in chunk])
            out.update({t: str(v) for t, v in zip(chunk, values, strict=True) if v is not None})
        return out

    def claim_backfill(
        self, schedule_id: str, *, bound_ms: int | None, revision: int, ticks: Sequence[int], token: str
    ) -> tuple[bool, int, list[int]]:
        """Claim ticks for the backfill run ``token``: ``(still the same
        revision, store time, per tick 1 claimed / 0 claimed by another
        run / 2 the leader's)``."""
        reply = decode(
            self._script("backfill")(
                keys=[self.keys.ticks, self.keys.backfilled(schedule_id), self.keys.runtime_revs],
                args=[schedule_id, "" if bound_ms is None else bound_ms, revision, json.dumps(list(ticks)), token],
            )
        )
        return reply.status == Status.OK, reply.server_ms, [int(r) for r in reply.payload]

    def settle_backfill(
        self, schedule_id: str, *, token: str, sent: Sequence[tuple[int, str]], unsent: Sequence[int]
    ) -> None:
        """Mark ``sent`` ticks (with their message ids) enqueued and record
        them ``backfilled``; release the ``unsent`` ones for a next run."""
        self._script("backfill_settle")(
            keys=[self.keys.backfilled(schedule_id), self.keys.history],
            args=[
                schedule_id,
                token,
                self.history_length,
                json.dumps([list(s) for s in sent]),
                json.dumps(list(unsent)),
            ],
        )


def live_pauses(members: Any, expiries: Any, now_ms: int) -> dict[str, int | None]:
    """The paused members whose expiry has not passed, with their expiry."""
    out: dict[str, int | None] = {}
    for member in members:
        text = str(expiries.get(member, ""))
        expiry = int(text) if text.isdigit() else None
        if expiry is None or expiry > now_ms:
            out[str(member)] = expiry
    return out
