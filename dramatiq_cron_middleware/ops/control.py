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
import time
from collections.abc import Sequence
from typing import Any

import redis
from dramatiq import Broker

from ..audit import Action, AuditLog, Triggered, TriggerRefused
from ..schedules.schedule import BoundSchedule
from ..store.codes import RESULT_OUTCOMES, ClaimResult, parse_ledger_value
from ..store.keys import Keys
from ..store.lease import parse_schedule_set
from ..targets import (
    AmbiguousTarget,
    RuntimeCatalogue,
    Target,
    UnknownTarget,
    actor_of,
    find_runtime,
    paused_by,
    resolve_target,
)
from .format import duration_ms, instant_ms, iso, span

__all__ = [
    "AmbiguousTarget",
    "Candidate",
    "Control",
    "HistoryEntry",
    "HistoryPage",
    "LastDecision",
    "LeaderInfo",
    "ReplicasLacking",
    "RuntimeCatalogue",
    "Target",
    "TriggerRefused",
    "Triggered",
    "UnknownTarget",
    "find_runtime",
    "pause_expiry",
    "paused_by",
    "resolve_target",
]

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
    #: Who did an operator action (``api``, ``cli``, a dashboard user);
    #: "" for the leader's tick outcomes.
    who: str = ""

    @property
    def actor_name(self) -> str:
        """The actor part of the schedule id (``actor``, ``actor/name`` or a
        runtime schedule's ``actor:name``)."""
        return self.actor_of(self.schedule_id)

    @staticmethod
    def actor_of(schedule_id: str) -> str:
        """The actor part of a schedule id."""
        return actor_of(schedule_id)


class Control:
    """Read and steer one scheduler (one key prefix) in Redis.

    Parameters:
      client: A client with short timeouts and ``decode_responses=True``
        (see :func:`~dramatiq_cron_middleware.store.connection.scheduler_clients`).
      keys: The scheduler's key names.
      history_length: Approximate cap of the history stream, honoured when
        a manual trigger is appended.
    """

    def __init__(self, *, client: redis.Redis, keys: Keys, history_length: int = 10_000) -> None:
        self.client = client
        self.keys = keys
        self.history_length = history_length
        #: Pause, resume and trigger, recorded in the history (the audit trail).
        self.audit = AuditLog(client=client, keys=keys, history_length=history_length)

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

    def replicas_lacking(self) -> ReplicasLacking | None:
        """The last candidate whose writes lacked replicas, if recent (see
        ``CronMiddleware(replicas=...)``); None when none did."""
        fields: Any = self.client.hgetall(self.keys.replicas)
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

    def candidates(self, *, since_ms: int) -> list[Candidate]:
        """Candidates seen at or after ``since_ms`` (server time), newest first."""
        out = []
        seen: Any = self.client.zrevrangebyscore(self.keys.candidates, "+inf", since_ms, withscores=True)
        infos: Any = self.client.hmget(self.keys.candidate_info, [m for m, _ in seen]) if seen else []
        for (member, score), info in zip(seen, infos, strict=True):
            host, _, rest = str(member).rpartition("|")
            host, _, pid = host.rpartition("|")
            fingerprint, _, version = str(info or "").partition("|")
            out.append(
                Candidate(
                    host=host,
                    pid=int(pid) if pid.isdigit() else 0,
                    candidate_id=rest,
                    seen_ms=int(score),
                    fingerprint=fingerprint,
                    version=version,
                )
            )
        return out

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        """The schedule sets the candidates published (schedule id -> shape)
        by fingerprint; None for one missing or unreadable."""
        values: Any = self.client.hmget(self.keys.candidate_sets, fingerprints) if fingerprints else []
        return {fp: parse_schedule_set(value) for fp, value in zip(fingerprints, values, strict=True)}

    def ineligible(self, *, since_ms: int) -> list[Candidate]:
        """Processes that may not lead (``lead=False``) seen at or after
        ``since_ms`` (server time), newest first."""
        seen: Any = self.client.zrevrangebyscore(self.keys.ineligible, "+inf", since_ms, withscores=True)
        out = []
        for member, score in seen:
            host, _, rest = str(member).rpartition("|")
            host, _, pid = host.rpartition("|")
            pid_number = int(pid) if pid.isdigit() else 0
            out.append(Candidate(host=host, pid=pid_number, candidate_id=rest, seen_ms=int(score)))
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
            fallback = "baseline" if parsed.baseline else _outcome_of(parsed.result)
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
        """The paused set: schedule ids, and ``<actor>:*`` for actors paused
        as a whole (see :attr:`Target.member`); a pause whose expiry has
        passed is not in it, whether or not the leader has removed it yet."""
        return set(self.pauses())

    def pauses(self) -> dict[str, int | None]:
        """The live pauses: paused-set member -> the instant (epoch ms) it
        ends, or None for a pause until resumed."""
        pipe = self.client.pipeline(transaction=True)
        pipe.smembers(self.keys.paused)
        pipe.hgetall(self.keys.paused_until)
        members, expiries = pipe.execute()
        now = self.server_ms() if expiries else 0
        out: dict[str, int | None] = {}
        for member in members:
            text = str(expiries.get(member, ""))
            expiry = int(text) if text.isdigit() else None
            if expiry is None or expiry > now:
                out[str(member)] = expiry
        return out

    def pause(self, target: Target, *, who: str = "api", until_ms: int | None = None) -> bool:
        """Pause one schedule, or every schedule of an actor; the leader
        records their ticks as paused.  With ``until_ms`` (epoch ms) only
        ticks before that instant are paused, and the leader's claim ends
        the pause then.  False if it already was (with the same end).  The
        change is recorded in the history as done by ``who``."""
        return self.audit.pause(target.member, who=who, until_ms=until_ms).changed

    def resume(self, target: Target, *, who: str = "api") -> bool:
        """Undo :meth:`pause` of the same target.  False if it was not paused."""
        return self.audit.resume(target.member, who=who).changed

    def record_trigger(self, *, schedule_id: str, tick_ms: int, message_id: str, who: str = "api") -> int:
        """Append a manual trigger to the history; returns its server time.
        The ledger is left alone, so the schedule fires as before."""
        return self.audit.record(
            Action.TRIGGER, who=who, entries=[(schedule_id, "manual")], tick_ms=tick_ms, message_id=message_id
        )

    # -- reads and actions for the web dashboard --------------------------
    #
    # The dashboard renders one page of schedules at a time, possibly out of
    # a large runtime set, so these read only what a page needs: the ledger entries of
    # the page's schedules, a bounded slice of the history stream.

    def decisions(self, schedule_ids: Sequence[str]) -> dict[str, LastDecision]:
        """The ledger entries of just these schedules, in one HMGET.  A
        fired tick shows as ``fired`` even when it was a catch-up (only the
        history stream tells those apart)."""
        if not schedule_ids:
            return {}
        values: Any = self.client.hmget(self.keys.ticks, list(schedule_ids))
        decided = {sid: _decision(v) for sid, v in zip(schedule_ids, values, strict=True) if v}
        return {sid: d for sid, d in decided.items() if d is not None}

    def schedule_history(
        self, schedule_id: str, *, limit: int, before: str | None = None, scan: int = 2500
    ) -> HistoryPage:
        """Up to ``limit`` history entries of one schedule, newest first,
        older than the entry id ``before`` (None: from the newest).

        Reads at most about ``scan`` stream entries, so a rare schedule among
        many costs a bounded time per page; the returned cursor carries on
        from where the scan stopped.
        """
        out: list[HistoryEntry] = []
        cursor = before
        scanned = 0
        chunk = 500
        while scanned < scan:
            upper = "+" if cursor is None else "(" + cursor
            rows: Any = self.client.xrevrange(self.keys.history, max=upper, min="-", count=chunk)
            for entry_id, fields in rows:
                scanned += 1
                cursor = entry_id
                if fields.get("schedule") == schedule_id:
                    out.append(_entry(entry_id, fields))
                    if len(out) == limit:
                        return HistoryPage(entries=out, older=entry_id, scanned=scanned)
            if len(rows) < chunk:
                return HistoryPage(entries=out, older=None, scanned=scanned)
        return HistoryPage(entries=out, older=cursor, scanned=scanned)

    def round_trip_ms(self) -> float:
        """One PING, timed on this process's monotonic clock, in ms."""
        started = time.monotonic()
        self.client.ping()
        return (time.monotonic() - started) * 1000

    def maxmemory_policy(self) -> str | None:
        """Redis's ``maxmemory-policy``, or None where ``CONFIG GET`` is
        refused (ACLs, managed services)."""
        try:
            reply: Any = self.client.config_get("maxmemory-policy")
        except redis.ResponseError:
            return None
        value = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
        return str(value) if value else None

    def trigger(self, broker: Broker, schedule: BoundSchedule, *, prefix: str, who: str = "api") -> Triggered:
        """Enqueue a schedule's message now, marked manual with a fresh id,
        and record it as ``triggered`` by ``who``; see :meth:`AuditLog.trigger`.

        Raises:
          TriggerRefused: the broker is a ``StubBroker``, or the enqueue failed
            for a reason other than Redis (a ``redis.RedisError`` propagates).
        """
        return self.audit.trigger(broker, schedule, prefix=prefix, who=who)


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
        who=fields.get("who", ""),
    )


def pause_expiry(now_ms: int, *, until: object = None, duration: object = None) -> int | None:
    """When a pause given ``until`` or ``duration`` ends, in epoch ms (None:
    until resumed), for the CLI, the API and the dashboard alike.

    Parameters:
      now_ms: Redis's time (the scheduler's clock).
      until: An aware ``datetime``, epoch milliseconds, or an ISO 8601
        text with its offset (``2026-12-24T09:00+01:00``, ``...Z``).
      duration: Milliseconds, a ``timedelta``, or a text such as ``2h``,
        ``90m``, ``1h30m``.

    Raises:
      ValueError: naming the value: both given, unreadable, not positive,
        or an instant not after ``now_ms``.
    """
    if until is not None and duration is not None:
        raise ValueError(f"give a pause's end or its duration, not both (got until={until!r}, for={duration!r})")
    if duration is not None:
        return now_ms + duration_ms(duration)
    if until is None:
        return None
    try:
        until = instant_ms(until)
    except ValueError as exc:
        raise ValueError(f"a pause's end: {exc}") from None
    if until <= now_ms:
        raise ValueError(f"a pause's end must be in the future, got {iso(until)} (Redis's time is {iso(now_ms)})")
    return until


@dataclasses.dataclass(frozen=True)
class HistoryPage:
    """A slice of one schedule's history, newest first.

    ``older`` is the cursor for the next (older) slice, or None when the
    start of the stream was reached; ``scanned`` is how many stream entries
    were read to find these.
    """

    entries: list[HistoryEntry]
    older: str | None
    scanned: int


def _decision(value: str) -> LastDecision | None:
    """A ledger value as a decision; None when it does not parse (the
    leader replaces such a value with a baseline)."""
    parsed = parse_ledger_value(value)
    if parsed is None:
        return None
    outcome = "baseline" if parsed.baseline else _outcome_of(parsed.result)
    return LastDecision(tick_ms=parsed.tick_ms, epoch=parsed.epoch, outcome=str(outcome))


def _outcome_of(result: int | None) -> str:
    """A claim result stored in the ledger as an outcome ("unknown" for none
    we know).  A fired tick may also have been a catch-up; the history
    stream tells which."""
    if result is None or result not in RESULT_OUTCOMES:
        return "unknown"
    return RESULT_OUTCOMES[ClaimResult(result)]
