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
from collections.abc import Collection, Sequence
from typing import Any, Protocol

import redis
from dramatiq import Broker
from dramatiq.brokers.stub import StubBroker

from ..errors import CronScheduleError
from ..schedules.planner import message_for
from ..schedules.schedule import BoundSchedule
from ..store.codes import RESULT_OUTCOMES, ClaimResult, Outcome, decode, load_script, parse_ledger_value, whole_actor
from ..store.connection import redact
from ..store.keys import Keys
from .format import span

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

    def describe(self, now_ms: int) -> str:
        """One line for people."""
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

    @property
    def actor_name(self) -> str:
        """The actor part of the schedule id (``actor``, ``actor/name`` or a
        runtime schedule's ``actor:name``)."""
        return self.actor_of(self.schedule_id)

    @staticmethod
    def actor_of(schedule_id: str) -> str:
        """The actor part of a schedule id."""
        return schedule_id.split("/", 1)[0].split(":", 1)[0]


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
        self._record_trigger = load_script(client, "trigger")

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
        as a whole (see :attr:`Target.member`)."""
        members: Any = self.client.smembers(self.keys.paused)
        return set(members)

    def pause(self, target: Target) -> bool:
        """Pause one schedule, or every schedule of an actor; the leader
        records their ticks as paused.  False if it already was."""
        return bool(self.client.sadd(self.keys.paused, target.member))

    def resume(self, target: Target) -> bool:
        """Undo :meth:`pause` of the same target.  False if it was not paused."""
        return bool(self.client.srem(self.keys.paused, target.member))

    def record_trigger(self, *, schedule_id: str, tick_ms: int, message_id: str) -> int:
        """Append a manual trigger to the history; returns its server time.
        The ledger is left alone, so the schedule fires as before."""
        args: list[Any] = [self.history_length, schedule_id, tick_ms, Outcome.TRIGGERED, "manual", message_id]
        return decode(self._record_trigger(keys=[self.keys.history, self.keys.lease], args=args)).server_ms

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

    def trigger(self, broker: Broker, schedule: BoundSchedule, *, prefix: str) -> Triggered:
        """Enqueue a schedule's message now, marked manual with a fresh id,
        and record it as ``triggered``; the ledger is left alone, so the
        schedule fires as before.

        Raises:
          TriggerRefused: the broker is a ``StubBroker`` (the message would
            only live in this process), or the enqueue failed for a reason
            other than Redis (a ``redis.RedisError`` propagates).
        """
        if isinstance(broker, StubBroker):
            raise TriggerRefused(
                "the app's broker is a StubBroker: a triggered message would only live in this process"
            )
        tick = self.server_ms()
        message = message_for(schedule, tick, prefix=prefix, manual=True, timestamp_ms=tick)
        try:
            broker.enqueue(message)
        except redis.RedisError:
            raise
        except Exception as exc:
            detail = redact(f"{type(exc).__name__}: {exc}")
            raise TriggerRefused(f"enqueueing {schedule.actor_name} failed: {detail}") from None
        at = self.record_trigger(schedule_id=schedule.id, tick_ms=tick, message_id=message.message_id)
        return Triggered(
            message_id=message.message_id,
            tick=message.options["cron_tick"],
            queue_name=schedule.queue_name,
            recorded_ms=at,
        )


class RuntimeCatalogue(Protocol):
    """What operator tools need of the runtime schedules: the part of
    :class:`~dramatiq_cron_middleware.store.runtime.RuntimeSchedules` they call."""

    def list(
        self, *, actor: object | None = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> Any:
        """A page of runtime schedules (``items``, ``cursor``, ``total``)."""

    def get(self, actor: object, name: str) -> Any:
        """One runtime schedule (with ``.schedule``), or None."""


def find_runtime(runtime: RuntimeCatalogue, schedule_id: str) -> BoundSchedule | None:
    """The runtime schedule with this id (``actor:name``), if any."""
    actor, sep, name = schedule_id.partition(":")
    if not sep or not actor or not name or "/" in actor:
        return None
    try:
        record = runtime.get(actor, name)
    except CronScheduleError:  # not a valid runtime name: not one of them
        return None
    return None if record is None else record.schedule


@dataclasses.dataclass(frozen=True)
class Target:
    """What an operator acts on: one schedule, or every schedule of an actor
    (declared and runtime) when ``schedule_id`` is None."""

    actor_name: str
    schedule_id: str | None
    #: The schedule, when this process knows it (None for a whole actor, and
    #: for a paused schedule the app no longer declares).
    schedule: BoundSchedule | None = None

    @classmethod
    def of(cls, schedule: BoundSchedule) -> Target:
        """That schedule alone."""
        return cls(schedule.actor_name, schedule.id, schedule)

    @property
    def member(self) -> str:
        """Its member of the paused set: the schedule's id, or
        ``<actor>:*`` for the whole actor (an actor's unnamed schedule has
        the actor's name as its id, so the actor needs a member of its own)."""
        return self.schedule_id if self.schedule_id is not None else whole_actor(self.actor_name)

    def __str__(self) -> str:
        return self.schedule_id if self.schedule_id is not None else f"every schedule of actor {self.actor_name}"


class UnknownTarget(Exception):
    """No schedule or actor by that name; the message says which."""


class AmbiguousTarget(Exception):
    """An actor name that stands for several schedules.

    ``actor`` is the name, ``total`` how many schedules it has, and
    ``choices`` the ids of the first few, to choose from.
    """

    def __init__(self, actor: str, total: int, choices: list[str]) -> None:
        self.actor = actor
        self.total = total
        self.choices = choices
        shown = ", ".join(choices) + (", ..." if total > len(choices) else "")
        super().__init__(f"actor {actor!r} has {total} schedules ({shown})")


#: How many schedule ids an :class:`AmbiguousTarget` lists.
_CHOICES = 5


def resolve_target(
    *,
    declared: Sequence[BoundSchedule],
    runtime: RuntimeCatalogue | None,
    name: str | None = None,
    schedule_id: str | None = None,
    actor: str | None = None,
    paused: Collection[str] = (),
) -> Target:
    """The one thing an operator named, for the command and the dashboard
    alike.  Give exactly one of:

    - ``schedule_id``: exactly that schedule (``actor``, ``actor/name`` or a
      runtime ``actor:name``);
    - ``name``: an actor with a single schedule, or a schedule id (an actor
      name that has several schedules, declared or runtime, is refused: the
      actor's unnamed schedule shares its name, and acting on the wrong one,
      or on all, is worse than asking);
    - ``actor``: every schedule of that actor, said explicitly.

    A target that is in ``paused`` is found even when the app no longer
    knows it, so whatever is paused can be resumed.

    Raises:
      UnknownTarget: nothing by that name.
      AmbiguousTarget: ``name`` is an actor with several schedules.
    """
    if [name, schedule_id, actor].count(None) != 2:
        raise ValueError("resolve_target() takes exactly one of name=, schedule_id= or actor=")
    if actor is not None:
        if any(s.actor_name == actor for s in declared) or _runtime_of(runtime, actor, 1)[1]:
            return Target(actor, None)
        if whole_actor(actor) in paused:
            return Target(actor, None)
        raise UnknownTarget(f"unknown cron actor {actor!r}")
    text = name if name is not None else schedule_id
    assert text is not None
    if name is not None:
        own = [s for s in declared if s.actor_name == name]
        listed, total = _runtime_of(runtime, name, _CHOICES)
        total += len(own)
        if total == 1:
            found = own or listed
            return Target.of(found[0])
        if total > 1:
            raise AmbiguousTarget(name, total, [s.id for s in [*own, *listed][:_CHOICES]])
    schedule = next((s for s in declared if s.id == text), None)
    if schedule is None and runtime is not None:
        schedule = find_runtime(runtime, text)
    if schedule is not None:
        return Target.of(schedule)
    if text in paused:
        return Target(HistoryEntry.actor_of(text), text)
    raise UnknownTarget(f"unknown cron {'actor or schedule' if name is not None else 'schedule'} {text!r}")


def _runtime_of(runtime: RuntimeCatalogue | None, actor: str, limit: int) -> tuple[list[BoundSchedule], int]:
    """The first ``limit`` runtime schedules of an actor, and how many it has."""
    if runtime is None:
        return [], 0
    try:
        page = runtime.list(actor=actor, limit=limit)
    except CronScheduleError:  # not a valid actor name for runtime schedules
        return [], 0
    return [r.schedule for r in page.items], int(page.total or len(page.items))


def paused_by(schedule: BoundSchedule, paused: Collection[str]) -> Target | None:
    """What is paused that stops this schedule (itself, or its whole actor),
    as a resume would name it; None when it runs."""
    if schedule.id in paused:
        return Target.of(schedule)
    return Target(schedule.actor_name, None) if whole_actor(schedule.actor_name) in paused else None


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


class TriggerRefused(Exception):
    """A manual trigger that cannot work; the message says why."""


@dataclasses.dataclass(frozen=True)
class Triggered:
    """A manual trigger that was enqueued and recorded."""

    message_id: str
    tick: str
    queue_name: str
    recorded_ms: int


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
