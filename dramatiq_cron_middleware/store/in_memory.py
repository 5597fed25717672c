"""The store protocol in one process: the Lua scripts' semantics in Python.

A :class:`MemoryServer` plays the Redis server: it holds the lease, the
ledger, the history, the batch records and the runtime definitions, and
reads time from an injected clock (epoch ms), on which TTLs expire.  Each
candidate gets an :class:`InMemoryStore` on it (its own lease handle, as a
process has its own :class:`~..lease.Lease`).  No thread, no socket: a
leader can run on it in-process, on a fake clock.

Every operation passes :meth:`MemoryServer.call` by name (the protocol's
method names), where a test double injects faults (a lost reply, a
refusal: tests/support/faults.py); :attr:`MemoryServer.replicas_acking` says how
many replicas acknowledge writes now (a store that requires more raises
:class:`~.durability.Unconfirmed` after its write ran).  Keys holding a foreign type are not modelled:
the corrupt flags stay empty but for unusable batch records.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dramatiq.logging import get_logger

from ..errors import CronScheduleError
from ..schedules.schedule import DEFAULT_CATCH_UP_WINDOW, BoundSchedule, CatchUp
from .boundary import Payload
from .clock import ServerClock
from .codes import ClaimResult, Corrupt, Outcome, SyncCode, whole_actor
from .durability import Ack, Durability, SentinelQuorum, Unconfirmed
from .keys import Keys
from .lease import Acquired, Held, Renewed, parse_schedule_set
from .ledger import (
    BATCH_RECORD_MS,
    FUTURE_TOLERANCE_MS,
    BadRequest,
    Claim,
    ClaimReply,
    NotLeader,
    Settled,
    SyncEntry,
    SyncReply,
)
from .operator import (
    RECENT,
    Candidate,
    HistoryEntry,
    HistoryPage,
    LastDecision,
    LeaderInfo,
    decision_of,
    live_pauses,
    matches,
    precise,
)
from .runs import ALERTS_CAP, ALIVE_MS, OUTBOXES, HealthRead, HealthWrite, RunEvent
from .runtime import ActorInfo, RuntimePage, RuntimeSchedule, RuntimeSchedules, already_exists, schedule_id_of
from .timing import Timing

if TYPE_CHECKING:
    from .abc import OperatorStore, RunStore, Store
    from .runs import RedisRuns

__all__ = ["HistoryRecord", "InMemoryStore", "MemoryOperator", "MemoryRuns", "MemoryRuntimeSchedules", "MemoryServer"]

# The ledger value grammar as the scripts read it (common.lua's parse_entry).
_ENTRY = re.compile(r"^(-?\d+):(\d+)(.*)$")
_RESULT_TAIL = re.compile(r"^:(-?\d)$")
_RECORD = re.compile(r"^[-\d,]*$")


def _parse_entry(value: str | None) -> tuple[int, str, int | None] | None:
    """``(tick, epoch as written, result or None)``, or None when unusable."""
    if value is None or len(value) > 40:
        return None
    match = _ENTRY.match(value)
    if match is None or len(match.group(1)) > 16 or len(match.group(2)) > 15:
        return None
    tail = match.group(3)
    result = None
    if tail not in ("", ":baseline"):
        found = _RESULT_TAIL.match(tail)
        if found is None:
            return None
        result = int(found.group(1))
    return int(match.group(1)), match.group(2), result


@dataclasses.dataclass(frozen=True)
class HistoryRecord:
    """One history entry, with the fields the stream holds."""

    schedule_id: str
    tick_ms: int
    outcome: str
    at_ms: int
    epoch: str
    detail: str
    message_id: str
    #: Who did an operator action ("" for the leader's outcomes).
    who: str = ""
    #: Its id, ``<at>-<seq>`` as a stream entry's.
    entry_id: str = ""


@dataclasses.dataclass
class _Lease:
    fields: dict[str, str]
    expires_ms: int


class MemoryServer:
    """The shared state of every candidate, as Redis would hold it.

    Parameters:
      now_ms: The store's clock, epoch ms (its ``TIME``).
      wait: Called with seconds when a follower waits and nothing woke it
        (drive a fake clock forward here).  Defaults to None: return at once.
    """

    def __init__(self, *, now_ms: Callable[[], int], wait: Callable[[float], None] | None = None) -> None:
        self.now_ms = now_ms
        self.wait = wait
        #: Open presence connections (FLUSHALL keeps them).
        self.connections: set[str] = set()
        #: How many replicas acknowledge writes (WAIT's answer): detach
        #: them by setting 0.
        self.replicas_acking = 0
        #: The address a durable write names to the sentinels (see
        #: durability.py's ``Ack``); None: unknown.
        self.address: tuple[str, int] | None = None
        self.flushall()
        self._connections = 0

    def flushall(self) -> None:
        """Lose everything (eviction, FLUSHALL, a restart without data)."""
        self._lease: _Lease | None = None
        self.epoch: int | None = None
        #: Schedule id -> ledger value (the grammar of protocol.py).
        self.ticks: dict[str, str] = {}
        self.shapes: dict[str, str] = {}
        self.history: list[HistoryRecord] = []
        self.history_seq = 0
        #: How many entries the cap dropped (a trimmed history reaches less far back).
        self.history_trimmed = 0
        #: Schedule id -> tick -> backfill mark (``c|<run>`` claimed, ``e`` enqueued).
        self.backfilled: dict[str, dict[int, str]] = {}
        #: Paused schedule ids and ``<actor>:*`` members.
        self.paused: set[str] = set()
        #: Paused members' expiries (epoch ms), as ``{p}:paused:until``.
        self.paused_until: dict[str, int] = {}
        self.batches: dict[str, tuple[str, int]] = {}
        self.running: dict[str, tuple[str, int]] = {}
        self.candidates: dict[str, int] = {}
        self.candidate_info: dict[str, str] = {}
        self.candidate_sets: dict[str, str] = {}
        self.wakes: dict[str, tuple[int, int]] = {}
        #: A runtime write or removal since a leader last waited for one
        #: (the notification list of runtime.py's scripts).
        self.runtime_notified = False
        self.runtime: dict[str, BoundSchedule] = {}
        self.runtime_revs: dict[str, int] = {}
        self.runtime_version = 0
        self.runtime_changes: dict[str, int] = {}
        #: Run monitoring (see runs.py): schedule id -> tick -> run record.
        self.runs: dict[str, dict[int, dict[str, Any]]] = {}
        self.runs_last: dict[str, dict[str, Any]] = {}
        self.run_events: list[RunEvent] = []
        self.runs_open: dict[str, int] = {}
        self.health: dict[str, str] = {}
        self.health_cursor: str | None = None
        #: outbox name -> its alerts (runs.OUTBOXES).
        self.alerts: dict[str, list[str]] = {name: [] for name in OUTBOXES}
        #: ``r|<tick>|<id>`` -> when its worker's heartbeat lapses.
        self.runs_alive: dict[str, int] = {}
        #: The operators' record of writes lacking replicas (keys.replicas).
        self.replicas_report: dict[str, Any] | None = None

    def call(self, operation: str, run: Callable[[], object]) -> object:
        """Run one operation of the protocol (named by its method): the one
        place every call passes, where a test double injects faults
        (tests/support/faults.py)."""
        return run()

    # -- state as the scripts see it ------------------------------------------

    # A key with a TTL lives while the time has not passed its expiry
    # (Redis expires it once now > expiry).

    def lease_fields(self) -> dict[str, str] | None:
        """The lease's fields, None when there is none (or it expired)."""
        if self._lease is not None and self._lease.expires_ms < self.now_ms():
            self._lease = None
        return None if self._lease is None else self._lease.fields

    def delete_lease(self) -> None:
        """DEL the lease (an operator, an eviction)."""
        self._lease = None

    def set_running(self, schedule_id: str, message_id: str, ttl_ms: int) -> None:
        """Set a schedule's running mark (``overlap="skip"``)."""
        self.running[schedule_id] = (message_id, self.now_ms() + ttl_ms)

    def clear_running(self, schedule_id: str) -> None:
        """Clear a running mark (its message finished)."""
        self.running.pop(schedule_id, None)

    def is_running(self, schedule_id: str) -> bool:
        """Whether a schedule's running mark exists."""
        mark = self.running.get(schedule_id)
        if mark is not None and mark[1] < self.now_ms():
            del self.running[schedule_id]
            mark = None
        return mark is not None

    def _batch(self, batch_id: str) -> str | None:
        record = self.batches.get(batch_id)
        if record is not None and record[1] < self.now_ms():
            del self.batches[batch_id]
            record = None
        return None if record is None else record[0]

    def set_batch_record(self, batch_id: str, value: str) -> None:
        """Write a batch record as is (a stray write, a bad restore)."""
        self.batches[batch_id] = (value, self.now_ms() + BATCH_RECORD_MS)

    def _record(
        self, history_length: int, sid: str, tick: int, outcome: str, at: int, epoch: int, detail: str, message: str
    ) -> None:
        self.append_history(history_length, HistoryRecord(sid, tick, outcome, at, str(epoch), detail, message))

    def append_history(self, history_length: int, record: HistoryRecord) -> None:
        """Append to the history (with the next entry id), capped at ``history_length``."""
        self.history_seq += 1
        self.history.append(dataclasses.replace(record, entry_id=f"{record.at_ms}-{self.history_seq}"))
        self.history_trimmed += max(len(self.history) - history_length, 0)
        del self.history[: max(len(self.history) - history_length, 0)]

    def connect(self) -> str:
        """A new presence connection's id."""
        self._connections += 1
        conn = str(self._connections)
        self.connections.add(conn)
        return conn

    def disconnect(self, conn: str) -> None:
        """Close a presence connection (its process died)."""
        self.connections.discard(conn)

    # -- runtime definitions (the writes of RuntimeSchedules) -------------------

    def add_runtime(self, schedules: Sequence[BoundSchedule], *, history_length: int = 10_000) -> list[BoundSchedule]:
        """Create or replace runtime definitions, each with its own revision;
        the write owns the ledger entry and shape as ``runtime.py``'s write
        script does.  Returns the schedules as stored (with revisions)."""
        now = self.now_ms()
        for schedule in schedules:
            if schedule.at is not None and schedule.at <= now:
                raise CronScheduleError(
                    f"runtime schedule {schedule.id!r}: at={schedule.at} is not after the store's time ({now}): "
                    "a one-shot must lie in the future"
                )
        out = []
        for schedule in schedules:
            sid = schedule.id
            old = sid in self.runtime
            self.runtime_version += 1
            rev = self.runtime_version
            entry = self.ticks.get(sid)
            found = re.match(r"^(-?\d+):\d+", entry) if entry is not None else None
            tick = int(found.group(1)) if found else None
            if not (old and tick is not None and self.shapes.get(sid) == schedule.shape):
                start = tick if tick is not None and tick > now else now
                if start != tick:
                    self.ticks[sid] = f"{start}:0:baseline"
                self.shapes[sid] = schedule.shape
                if entry is not None:
                    why = (
                        "replaced with other ticks (expression, interval, zone or bounds): it starts from this write"
                        if old
                        else "added again after its removal: it starts from this write"
                    )
                    self._record(history_length, sid, start, Outcome.REBASED.value, now, 0, why, "")
            stored = dataclasses.replace(schedule, revision=rev)
            self.runtime[sid] = stored
            self.runtime_revs[sid] = rev
            self.runtime_changes[sid] = rev
            out.append(stored)
        self.runtime_notified = True
        return out

    def remove_runtime(self, schedule_id: str) -> bool:
        """Remove a runtime definition and its revision (a tombstone stays)."""
        if schedule_id not in self.runtime and schedule_id not in self.runtime_revs:
            return False
        self.runtime_version += 1
        self.runtime.pop(schedule_id, None)
        self.runtime_revs.pop(schedule_id, None)
        self.runtime_changes[schedule_id] = self.runtime_version
        self.runtime_notified = True
        return True


class _MemoryLease:
    """:class:`~.abc.LeaseStore` on a :class:`MemoryServer` (acquire.lua,
    renew.lua, release.lua, depose.lua)."""

    def __init__(
        self,
        server: MemoryServer,
        *,
        ttl_ms: int,
        clock: ServerClock,
        host: str,
        pid: int,
        fingerprint: str,
        version: str,
        presence: bool,
        durability: Durability,
    ) -> None:
        self.server = server
        self.durability = durability
        self.ttl_ms = ttl_ms
        self._timing = Timing.for_lease(ttl_ms)
        self.clock = clock
        self.host = host
        self.pid = pid
        self.fingerprint = fingerprint
        self.version = version
        self.candidate_id = uuid.uuid4().hex[:12]
        self.member = f"{host}|{pid}|{self.candidate_id}"
        self.token: str | None = None
        self._attempt: str | None = None
        self.presence: str | None = server.connect() if presence else None

    def presence_id(self) -> str:
        """This candidate's presence connection id ("" without, or closed)."""
        return self.presence if self.presence in self.server.connections else ""

    def _observe(self, operation: str, run: Callable[[], tuple[int, object]]) -> object:
        sent = self.clock.monotonic()

        def observed() -> object:
            server_ms, value = run()
            self.clock.observe(server_ms, sent, self.clock.monotonic())
            return value

        return self.server.call(operation, observed)

    def _seen(self, now: int) -> None:
        s = self.server
        s.candidates[self.member] = now
        for member in [m for m, at in s.candidates.items() if at <= now - self._timing.candidate_forgotten_ms]:
            del s.candidates[member]
            s.candidate_info.pop(member, None)
        s.candidate_info[self.member] = f"{self.fingerprint}|{self.version}"

    def acquire(self) -> Acquired | Held:
        token = self.token or self._attempt or f"{self.candidate_id}-{uuid.uuid4().hex[:8]}"
        self._attempt = token

        def run() -> tuple[int, Acquired | Held]:
            s = self.server
            now = s.now_ms()
            lease = s.lease_fields()
            self._seen(now)
            if lease is not None and lease["token"] == token:
                assert s._lease is not None
                s._lease.expires_ms = now + self.ttl_ms
                lease.update(renewed=str(now), conn=self.presence_id(), seq=str(int(lease["seq"]) + 1))
                return now, Acquired(int(lease["epoch"]), now, lease["fresh"] == "1")
            if lease is not None:
                assert s._lease is not None
                return now, Held(s._lease.expires_ms - now, lease["token"], lease["seq"])
            fresh = s.epoch is None
            if s.epoch is None:
                # The counter vanished: restart it above every epoch the ledger names.
                parsed = (_parse_entry(v) for v in s.ticks.values())
                s.epoch = max((int(p[1]) for p in parsed if p is not None), default=0)
            s.epoch += 1
            fields = dict(token=token, epoch=str(s.epoch), host=self.host, pid=str(self.pid), since=str(now))
            fields.update(renewed=str(now), ttl=str(self.ttl_ms), candidate=self.member, fresh=str(int(fresh)))
            fields.update(conn=self.presence_id(), seq="1")
            s._lease = _Lease(fields, now + self.ttl_ms)
            return now, Acquired(s.epoch, now, fresh)

        result = self._observe("acquire", run)
        assert isinstance(result, Acquired | Held)
        # A won lease: a retry finds it ours.
        self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        self._attempt = None
        self.token = token if isinstance(result, Acquired) else None
        return result

    def renew(self) -> Renewed | None:
        token = self.token
        if token is None:
            return None

        def run() -> tuple[int, Renewed | None]:
            s = self.server
            now = s.now_ms()
            lease = s.lease_fields()
            s.candidates[self.member] = now
            if lease is None or lease["token"] != token:
                return now, None
            assert s._lease is not None
            s._lease.expires_ms = now + self.ttl_ms
            lease.update(renewed=str(now), conn=self.presence_id(), seq=str(int(lease["seq"]) + 1))
            live = []
            for _, member in sorted(
                (at, m) for m, at in s.candidates.items() if at >= now - self._timing.candidate_live_ms
            ):
                fingerprint, _, version = s.candidate_info.get(member, "").partition("|")
                live.append((fingerprint, version))
            return now, Renewed(live=live)

        renewed = self._observe("renew", run)
        assert renewed is None or isinstance(renewed, Renewed)
        if renewed is None:
            self.token = None
        else:
            self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        return renewed

    def release(self) -> bool:
        token, self.token, self._attempt = self.release_token, None, None

        def run() -> bool:
            s = self.server
            now = s.now_ms()
            s.candidates.pop(self.member, None)
            s.candidate_info.pop(self.member, None)
            lease = s.lease_fields()
            if lease is None or lease["token"] != (token or "-"):
                return False
            s._lease = None
            seen = sum(1 for at in s.candidates.values() if at >= now - self._timing.candidate_live_ms)
            count, expires = s.wakes.get("", (0, 0))
            if expires < now:
                count = 0
            s.wakes[""] = (count + min(max(seen, 1), 64), now + self.ttl_ms)
            return True

        return bool(self.server.call("release", run))

    def forget(self) -> None:
        self.token = None

    @property
    def release_token(self) -> str | None:
        return self.token or self._attempt

    def depose(self, token: str, field: str, seen: str) -> bool:
        def run() -> bool:
            lease = self.server.lease_fields()
            if lease is None or lease["token"] != token or lease.get(field, "") != seen:
                return False
            self.server.delete_lease()
            return True

        return bool(self.server.call("depose", run))

    def report_replicas(self, unconfirmed: Unconfirmed | None) -> None:
        def run() -> None:
            s = self.server
            if unconfirmed is None:
                s.replicas_report = None
                return
            since = s.replicas_report["since"] if s.replicas_report else s.now_ms()
            s.replicas_report = dict(
                member=self.member,
                acked=unconfirmed.acked,
                required=unconfirmed.required,
                sentinels=unconfirmed.sentinels,
                since=since,
            )

        self.server.call("report_replicas", run)

    def depose_if_gone(self) -> bool:
        lease = self.server.call("depose_if_gone", self.server.lease_fields)
        assert lease is None or isinstance(lease, dict)
        if lease is None or not lease["token"] or not lease["conn"] or lease["conn"] in self.server.connections:
            return False
        return self.depose(lease["token"], "conn", lease["conn"])

    def wait_for_release(self, timeout_ms: int) -> bool:
        def pop() -> bool:
            now = self.server.now_ms()
            for key in ("", self.candidate_id):
                count, expires = self.server.wakes.get(key, (0, 0))
                if count > 0 and expires >= now:
                    self.server.wakes[key] = (count - 1, expires)
                    return True
            return False

        def run() -> bool:
            if pop():
                return True
            if self.server.wait is not None:
                self.server.wait(max(timeout_ms, 1) / 1000)
                return pop()
            return False

        return bool(self.server.call("wait_for_release", run))

    def wait_for_push(self, key: str, timeout_ms: int, *, bound_ms: int) -> str | None:
        def pop() -> str | None:
            now = self.server.now_ms()
            if self.server.runtime_notified:
                self.server.runtime_notified = False
                return key
            count, expires = self.server.wakes.get(self.candidate_id, (0, 0))
            if count > 0 and expires >= now:
                self.server.wakes[self.candidate_id] = (count - 1, expires)
                return self.candidate_id
            return None

        def run() -> str | None:
            popped = pop()
            if popped is None and self.server.wait is not None:
                self.server.wait(max(min(timeout_ms, bound_ms), 1) / 1000)
                popped = pop()
            return popped

        popped = self.server.call("wait_for_push", run)
        assert popped is None or isinstance(popped, str)
        return popped

    def wake_self(self) -> None:
        def run() -> None:
            now = self.server.now_ms()
            count, expires = self.server.wakes.get(self.candidate_id, (0, 0))
            self.server.wakes[self.candidate_id] = ((count if expires >= now else 0) + 1, now + self.ttl_ms)

        self.server.call("wake_self", run)

    def hand_over_commands(self) -> list[tuple[Any, ...]]:
        """None: a hand-over at shutdown needs a Redis connection."""
        return []

    def publish_schedule_set(self, shapes: dict[str, str]) -> None:
        if self.fingerprint:
            sets, text = self.server.candidate_sets, json.dumps(shapes, sort_keys=True)
            self.server.call("publish_schedule_set", lambda: sets.setdefault(self.fingerprint, text))

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        values = self.server.call("schedule_sets", lambda: [self.server.candidate_sets.get(f) for f in fingerprints])
        assert isinstance(values, list)
        return {fingerprint: parse_schedule_set(value) for fingerprint, value in zip(fingerprints, values, strict=True)}

    def prune_schedule_sets(self, keep: set[str]) -> None:
        def run() -> None:
            for fingerprint in [f for f in self.server.candidate_sets if f not in keep]:
                del self.server.candidate_sets[fingerprint]

        self.server.call("prune_schedule_sets", run)


class _MemoryLedger:
    """:class:`~.abc.LedgerStore` on a :class:`MemoryServer` (sync.lua,
    register.lua, claim.lua, settle.lua)."""

    def __init__(
        self, server: MemoryServer, *, clock: ServerClock, history_length: int, durability: Durability
    ) -> None:
        self.server = server
        self.clock = clock
        self.history_length = history_length
        self.durability = durability

    def _fenced(self, operation: str, token: str, run: Callable[[int], object]) -> object:
        sent = self.clock.monotonic()

        def observed() -> object:
            now = self.server.now_ms()
            self.clock.observe(now, sent, self.clock.monotonic())
            lease = self.server.lease_fields()
            if lease is None or lease["token"] != token:
                raise NotLeader()
            return run(now)

        return self.server.call(operation, observed)

    def sync(
        self,
        token: str,
        epoch: int,
        schedules: Sequence[str | SyncEntry],
        *,
        now_ms: int | None = None,
        expect_ledger: bool = False,
        on_chunk: Callable[[Iterable[tuple[str, int]]], None] | None = None,
    ) -> SyncReply:
        entries = [SyncEntry(e) if isinstance(e, str) else e for e in schedules]
        trusted_ms = self.clock.trusted_ms()

        def run(now: int) -> SyncReply:
            s = self.server
            base = min(now if now_ms is None else now_ms, now)
            future = max(now, trusted_ms) + FUTURE_TOLERANCE_MS
            existed = bool(s.ticks)
            ticks: dict[str, int] = {}
            codes: dict[str, SyncCode] = {}
            lost = expect_ledger and not existed and bool(entries)
            if lost:
                detail = "the ledger was gone; schedules restart from now"
                s._record(self.history_length, "*", base, Outcome.LEDGER_LOST.value, now, epoch, detail, "")
            events: list[tuple[str, str]] = []
            for sid, shape in entries:
                value = s.ticks.get(sid)
                code = SyncCode.OK
                parsed = _parse_entry(value)
                if value is None:
                    code = SyncCode.BASELINE
                elif parsed is None:
                    code = SyncCode.CORRUPT
                elif parsed[0] > future:
                    code = SyncCode.FUTURE
                if shape:
                    known = s.shapes.get(sid)
                    if known != shape:
                        s.shapes[sid] = shape
                        if known is not None and code == SyncCode.OK:
                            code = SyncCode.RESHAPED
                if code != SyncCode.OK:
                    value = f"{base}:{epoch}:baseline"
                    s.ticks[sid] = value
                    codes[sid] = code
                    if code in (SyncCode.CORRUPT, SyncCode.FUTURE):
                        events.append((sid, "unusable ledger entry replaced by a baseline"))
                    elif code == SyncCode.RESHAPED:
                        why = "the schedule changed (expression, zone, interval or bounds): it starts from now"
                        events.append((sid, why))
                assert value is not None
                ticks[sid] = int(value[: value.index(":")])
            # The script appends the rebased entries before the reshaped ones.
            for rebased in (True, False):
                for sid, detail in events:
                    if (codes[sid] != SyncCode.RESHAPED) == rebased:
                        s._record(self.history_length, sid, base, Outcome.REBASED.value, now, epoch, detail, "")
            return SyncReply(ticks=ticks, codes=codes, server_ms=now, corrupt=Corrupt.NONE, ledger_lost=lost)

        reply = self._fenced("sync", token, run)
        assert isinstance(reply, SyncReply)
        if on_chunk is not None:
            on_chunk(reply.ticks.items())
        return reply

    def register(self, schedules: Sequence[SyncEntry]) -> int:
        def run() -> int:
            s = self.server
            now = s.now_ms()
            created = 0
            for sid, shape in schedules:
                if sid not in s.ticks:
                    s.ticks[sid] = f"{now}:0:baseline"
                    created += 1
                if shape:
                    s.shapes.setdefault(sid, shape)
            return created

        return int(str(self.server.call("register", run)))

    def claim(
        self,
        token: str,
        epoch: int,
        batch_id: str,
        claims: Sequence[Claim],
        payloads: Sequence[Payload | None] | None = None,
    ) -> ClaimReply:
        if payloads is not None and any(p is not None for p in payloads):
            raise BadRequest("the memory store enqueues no messages: claim without payloads")
        trusted_ms = self.clock.trusted_ms()
        sent = self.clock.monotonic()

        def run() -> ClaimReply:
            s = self.server
            now = s.now_ms()
            self.clock.observe(now, sent, self.clock.monotonic())
            flags = Corrupt.NONE
            prior = s._batch(batch_id)
            if prior == "void":
                return ClaimReply([ClaimResult.REFUSED] * len(claims), now, flags)
            if prior is not None and _RECORD.match(prior):
                results = [ClaimResult(int(r)) for r in prior.split(",") if r]
                if len(results) == len(claims):
                    return ClaimReply(results, now, flags)
            if prior is not None:
                flags |= Corrupt.BATCH
            lease = s.lease_fields()
            if lease is None or lease["token"] != token:
                raise NotLeader()
            future = max(now, trusted_ms) + FUTURE_TOLERANCE_MS
            any_paused = bool(s.paused)
            expired: set[str] = set()

            def pauses(member: str, tick: int) -> bool:
                if member not in s.paused:
                    return False
                expiry = s.paused_until.get(member)
                if expiry is None:
                    return True
                if expiry <= now:
                    expired.add(member)
                return tick < expiry

            last: dict[str, tuple[int, str, int | None] | None] = {}
            marks: dict[str, tuple[str, int]] = {}
            writes: dict[str, str] = {}
            events: list[tuple[str, int, str, str, str]] = []
            results = []
            for c in claims:
                sid = c.schedule_id
                if sid not in last:
                    parsed = _parse_entry(s.ticks.get(sid))
                    last[sid] = None if parsed is None or parsed[0] > future else parsed
                entry = last[sid]
                outcome = str(c.outcome)
                if entry is None:
                    result = ClaimResult.LOST
                elif c.revision > 0 and s.runtime_revs.get(sid) != c.revision:
                    result = ClaimResult.GONE
                elif c.tick_ms > now:
                    result = ClaimResult.NOT_YET
                elif c.tick_ms < entry[0] or (c.tick_ms == entry[0] and entry[1] != str(epoch)):
                    result = ClaimResult.REFUSED
                elif c.tick_ms == entry[0]:
                    result = ClaimResult(entry[2]) if entry[2] is not None else ClaimResult.REFUSED
                else:
                    result = ClaimResult.RECORDED
                    if c.fire:
                        overlap = c.overlap_ttl_ms > 0
                        if any_paused and (pauses(sid, c.tick_ms) or pauses(whole_actor(c.actor_name), c.tick_ms)):
                            result, outcome = ClaimResult.PAUSED, Outcome.PAUSED.value
                        elif overlap and (sid in marks or s.is_running(sid)):
                            result, outcome = ClaimResult.SKIPPED, Outcome.SKIPPED.value
                        else:
                            result = ClaimResult.FIRE
                            if overlap:
                                marks[sid] = (c.message_id, c.overlap_ttl_ms)
                    last[sid] = (c.tick_ms, str(epoch), int(result))
                    writes[sid] = f"{c.tick_ms}:{epoch}:{int(result)}"
                    events.append((sid, c.tick_ms, outcome, c.detail, c.message_id))
                results.append(result)
            s.ticks.update(writes)
            for member in expired:
                s.paused.discard(member)
                s.paused_until.pop(member, None)
            for sid, (message_id, ttl) in marks.items():
                s.set_running(sid, message_id, ttl)
            for sid, tick, outcome, detail, message_id in events:
                s._record(self.history_length, sid, tick, outcome, now, epoch, detail, message_id)
            s.batches[batch_id] = (",".join(str(int(r)) for r in results), now + BATCH_RECORD_MS)
            return ClaimReply(results, now, flags)

        reply = self.server.call("claim", run)
        assert isinstance(reply, ClaimReply)
        self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        return reply

    @property
    def stages(self) -> bool:
        return False  # the memory store enqueues no messages (see claim)

    def publish(self, payloads: Sequence[Payload]) -> list[bool]:
        return [False] * len(payloads)

    def staged(self, limit: int) -> list[Payload]:
        return []

    def settle(self, batch_id: str, *, epoch: int, claims: Sequence[Claim]) -> Settled:
        def run() -> Settled:
            s = self.server
            now = s.now_ms()
            prior = s._batch(batch_id)
            if prior is not None and prior != "void" and _RECORD.match(prior):
                return Settled([ClaimResult(int(r)) for r in prior.split(",") if r])
            if prior is None or prior == "void":
                s.batches[batch_id] = ("void", now + BATCH_RECORD_MS)
                return Settled(None)
            # Unusable: read back from the ledger what this epoch was granted
            # (as settle.lua does: a newest tick of this batch decided by
            # this epoch proves its earlier ticks of that schedule decided).
            in_batch = {(c.schedule_id, c.tick_ms) for c in claims}
            results = []
            for c in claims:
                parsed = _parse_entry(s.ticks.get(c.schedule_id))
                result = ClaimResult.REFUSED
                if parsed is not None and parsed[1] == str(epoch) and parsed[2] is not None:
                    stored = ClaimResult(parsed[2])
                    if parsed[0] == c.tick_ms:
                        result = stored
                    elif parsed[0] > c.tick_ms and (c.schedule_id, parsed[0]) in in_batch:
                        if not c.fire:
                            result = ClaimResult.RECORDED
                        elif stored in (ClaimResult.FIRE, ClaimResult.PAUSED, ClaimResult.SKIPPED):
                            result = stored
                results.append(result)
            s.batches[batch_id] = ("void", now + BATCH_RECORD_MS)
            return Settled(results, record_corrupt=True)

        settled = self.server.call("settle", run)
        assert isinstance(settled, Settled)
        self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        return settled


class _MemoryRuntime:
    """:class:`~.abc.RuntimeReads` on a :class:`MemoryServer`."""

    def __init__(self, server: MemoryServer, *, history_length: int) -> None:
        self.server = server
        self.history_length = history_length

    def version(self) -> int:
        return int(str(self.server.call("version", lambda: self.server.runtime_version)))

    def load_all(self) -> tuple[int, dict[str, BoundSchedule]]:
        def run() -> tuple[int, dict[str, BoundSchedule]]:
            return self.server.runtime_version, dict(self.server.runtime)

        loaded = self.server.call("load_all", run)
        assert isinstance(loaded, tuple)
        return loaded

    def changes_since(self, version: int) -> tuple[int, dict[str, BoundSchedule | None]]:
        def run() -> tuple[int, dict[str, BoundSchedule | None]]:
            s = self.server
            if s.runtime_version < version:
                return s.runtime_version, {}
            changed = sorted((v, sid) for sid, v in s.runtime_changes.items() if v > version)
            return s.runtime_version, {sid: s.runtime.get(sid) for _, sid in changed}

        changes = self.server.call("changes_since", run)
        assert isinstance(changes, tuple)
        return changes

    def drop_stale(self, ticks: Sequence[tuple[BoundSchedule, int, str]]) -> list[bool]:
        def run() -> list[bool]:
            s = self.server
            now = s.now_ms()
            out = []
            for schedule, tick, message_id in ticks:
                stale = s.runtime_revs.get(schedule.id) != schedule.revision
                if stale:
                    detail = "its enqueue had failed, and the definition was removed or replaced before a retry"
                    s._record(self.history_length, schedule.id, tick, Outcome.DROPPED.value, now, 0, detail, message_id)
                out.append(stale)
            return out

        dropped = self.server.call("drop_stale", run)
        assert isinstance(dropped, list)
        return dropped

    def retire(self, schedules: Sequence[BoundSchedule]) -> list[str]:
        def run() -> list[str]:
            s = self.server
            out = []
            for schedule in schedules:
                assert schedule.at is not None
                entry = _parse_entry(s.ticks.get(schedule.id))
                if s.runtime_revs.get(schedule.id) != schedule.revision or entry is None or entry[0] < schedule.at:
                    continue
                s.remove_runtime(schedule.id)
                out.append(schedule.id)
            return out

        retired = self.server.call("retire", run)
        assert isinstance(retired, list)
        return retired


class InMemoryStore:
    """One candidate's :class:`~.abc.Store` on a :class:`MemoryServer`.

    Parameters:
      server: The shared state.
      clock: Observes the server's time on every reply that carries it.
      ttl_ms: The lease length in milliseconds.
      host, pid: Shown as the leader's identity.
      fingerprint, version: Published with this candidate.  Default "".
      presence: Register a presence connection (fast takeover).  Default False.
      history_length: Cap of the history.  Defaults to 10000.
      prefix: The key prefix the names in reports use.  Defaults to "cron".
      replicas: How many replicas must acknowledge an acquisition, a
        renewal, a claim or a settle (see durability.py).  Defaults to 0.
      sentinels: Who must name the server's ``address`` as the master
        after each of those writes (see durability.py).  Defaults to None:
        no Sentinel.
    """

    def __init__(
        self,
        server: MemoryServer,
        *,
        clock: ServerClock,
        ttl_ms: int,
        host: str = "memory",
        pid: int = 0,
        fingerprint: str = "",
        version: str = "",
        presence: bool = False,
        history_length: int = 10_000,
        prefix: str = "cron",
        replicas: int = 0,
        sentinels: SentinelQuorum | None = None,
    ) -> None:
        self.server = server
        self._keys = Keys(prefix)
        durability = Durability(replicas=replicas, sentinels=sentinels)
        self._clock = clock
        self._lease = _MemoryLease(
            server,
            ttl_ms=ttl_ms,
            clock=clock,
            host=host,
            pid=pid,
            fingerprint=fingerprint,
            version=version,
            presence=presence,
            durability=durability,
        )
        self._ledger = _MemoryLedger(server, clock=clock, history_length=history_length, durability=durability)
        self._runtime = _MemoryRuntime(server, history_length=history_length)
        self._runs = MemoryRuns(server, events_length=history_length)

    @property
    def keys(self) -> Keys:
        return self._keys

    @property
    def clock(self) -> ServerClock:
        return self._clock

    @property
    def lease(self) -> _MemoryLease:
        return self._lease

    @property
    def ledger(self) -> _MemoryLedger:
        return self._ledger

    @property
    def runtime(self) -> _MemoryRuntime:
        return self._runtime

    @property
    def runs(self) -> MemoryRuns:
        """Run monitoring's storage (not part of the leader's :class:`~.abc.Store`)."""
        return self._runs


class MemoryRuns:
    """Run monitoring's storage on a :class:`MemoryServer`: the semantics of
    ``run_record.lua``, ``health_read.lua`` and ``health_write.lua``.

    Parameters:
      server: The shared state.
      run_history: Runs kept per schedule.  Defaults to 100.
      events_length: Cap of the run events.  Defaults to 10000.
    """

    def __init__(self, server: MemoryServer, *, run_history: int = 100, events_length: int = 10_000) -> None:
        self.server = server
        self.run_history = run_history
        self.events_length = events_length
        self._seq = 0

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
        def run() -> bool:
            server = self.server
            now = server.now_ms()
            record = server.runs.get(schedule_id, {}).get(tick_ms)
            is_open = record is None or record["outcome"] in ("pending", "lost")
            mine = record is not None and record.get("d") == token
            alive = f"r|{tick_ms}|{schedule_id}"
            if mine and record is not None and record["outcome"] == ("running" if mode == "start" else outcome):
                if mode == "start" or record.get("finished") is not None:
                    return True  # a retry of a call whose reply was lost
            if mode == "start":
                if not is_open and not mine and record is not None and int(record["attempt"]) >= attempt:
                    return False
                server.runs_alive[alive] = now + ALIVE_MS
                record = {"tick": tick_ms, "outcome": "running", "attempt": attempt, "started": now}
                record.update(host=host, pid=pid, d=token)
            else:
                if record is not None and not mine:
                    if outcome == "dropped" and not is_open:
                        return False
                    if int(record.get("attempt", 0)) > attempt:
                        return False
                if record is None or not mine:
                    record = {"tick": tick_ms, "attempt": attempt, "host": host, "pid": pid, "d": token}
                server.runs_alive.pop(alive, None)
                record = {**record, "outcome": outcome, "finished": now, "error": error or None}
            self._put(schedule_id, tick_ms, record)
            self._seq += 1
            event = RunEvent(
                f"{now}-{self._seq}", mode, schedule_id, tick_ms, record["outcome"], now, record.get("error")
            )
            server.run_events.append(event)
            del server.run_events[: max(len(server.run_events) - self.events_length, 0)]
            return True

        return bool(self.server.call("record_run", run))

    def read_health(self, *, max_events: int, max_due: int, schedule_ids: Sequence[str] = ()) -> HealthRead:
        def run() -> HealthRead:
            server = self.server
            now = server.now_ms()
            cursor = server.health_cursor or "0-0"
            after = _event_key(cursor)
            events = [e for e in server.run_events if _event_key(e.entry_id) > after][:max_events]
            due = sorted(((m, d) for m, d in server.runs_open.items() if d <= now), key=lambda item: item[1])
            due = due[:max_due]
            named = [e.schedule_id for e in events] + [m.split("|", 2)[2] for m, _ in due] + list(schedule_ids)
            facts = {sid: server.health[sid] for sid in dict.fromkeys(named) if sid in server.health}
            later = min((d for d in server.runs_open.values() if d > now), default=None)
            lapses = ((m, server.runs_alive.get(m, 0)) for m, _ in due if m.startswith("r|"))
            alive = {m: lapse for m, lapse in lapses if lapse > now}
            return HealthRead(
                now_ms=now, cursor=cursor, events=events, due=due, facts=facts, next_deadline_ms=later, alive=alive
            )

        return self.server.call("read_health", run)  # type: ignore[return-value]

    def write_health(self, token: str, write: HealthWrite) -> bool:
        def run() -> bool:
            server = self.server
            lease = server.lease_fields()
            if lease is None or lease.get("token") != token:
                return False
            server.health.update(write.facts)
            if write.cursor is not None:
                server.health_cursor = write.cursor
            for member in write.remove:
                server.runs_open.pop(member, None)
            server.runs_open.update(write.add)
            for sid, tick, mark in write.runs:
                record = server.runs.get(sid, {}).get(tick)
                if mark == "pending" and record is None:
                    self._put(sid, tick, {"tick": tick, "outcome": "pending", "attempt": 1})
                elif mark == "lost" and record is not None and record["outcome"] == "running":
                    self._put(sid, tick, {**record, "outcome": "lost"})
            for name in write.outboxes if write.alerts else ():
                outbox = server.alerts[name]
                outbox.extend(write.alerts)
                del outbox[: max(len(outbox) - ALERTS_CAP, 0)]
            return True

        return bool(self.server.call("write_health", run))

    def wait_for_event(self, cursor: str, timeout_ms: int) -> bool:
        """Whether an event after ``cursor`` exists (no waiting: the clock is
        the caller's to move)."""
        after = _event_key(cursor)
        return any(_event_key(e.entry_id) > after for e in self.server.run_events)

    def keep_alive(self, members: Sequence[str]) -> None:
        def run() -> None:
            server = self.server
            now = server.now_ms()
            server.runs_alive.update({m: now + ALIVE_MS for m in members})
            for member in [m for m, lapse in server.runs_alive.items() if lapse <= now]:
                del server.runs_alive[member]

        if members:
            self.server.call("keep_alive", run)

    def alerts(self, limit: int, *, outbox: str) -> list[str]:
        return list(self.server.alerts[outbox][:limit])

    def alert_delivered(self, alert: str, *, outbox: str) -> None:
        if alert in self.server.alerts[outbox]:
            self.server.alerts[outbox].remove(alert)

    def runs_of(self, schedule_id: str, *, limit: int = 100) -> list[str]:
        """A schedule's run records as stored (JSON), newest first."""
        kept = self.server.runs.get(schedule_id, {})
        return [json.dumps(kept[tick]) for tick in sorted(kept, reverse=True)[:limit]]

    def last_runs(self, schedule_ids: Sequence[str]) -> list[str | None]:
        """Each schedule's newest run record as stored (JSON), or None."""
        last = self.server.runs_last
        return [json.dumps(last[sid]) if sid in last else None for sid in schedule_ids]

    def _put(self, schedule_id: str, tick: int, record: dict[str, Any]) -> None:
        kept = self.server.runs.setdefault(schedule_id, {})
        kept[tick] = record
        for old in sorted(kept)[: max(len(kept) - self.run_history, 0)]:
            del kept[old]
        if tick == max(kept):
            self.server.runs_last[schedule_id] = record


class MemoryOperator:
    """The operator half of the store protocol (:class:`~.abc.OperatorStore`)
    on a :class:`MemoryServer`: what :class:`~.operator.RedisOperator` does
    on Redis (audit.lua, backfill.lua, backfill_settle.lua).

    Parameters:
      server: The shared state.
      history_length: Cap of the history.  Defaults to 10000.
      prefix: The key prefix.  Defaults to "cron".
    """

    def __init__(self, server: MemoryServer, *, history_length: int = 10_000, prefix: str = "cron") -> None:
        self.server = server
        self.keys = Keys(prefix)
        self.history_length = history_length

    def server_ms(self) -> int:
        return self.server.now_ms()

    def leader(self) -> LeaderInfo | None:
        fields = self.server.lease_fields()
        lease = self.server._lease
        if fields is None or lease is None:
            return None
        return LeaderInfo.of(fields, lease.expires_ms - self.server.now_ms())

    def replicas_record(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.server.replicas_report or {}).items()}

    def candidates(self, *, since_ms: int) -> list[Candidate]:
        seen = sorted(self.server.candidates.items(), key=lambda item: -item[1])
        info = self.server.candidate_info
        return [Candidate.of(m, s, info.get(m, "")) for m, s in seen if s >= since_ms]

    def ineligible(self, *, since_ms: int) -> list[Candidate]:
        return []

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        return {fp: parse_schedule_set(self.server.candidate_sets.get(fp)) for fp in fingerprints}

    def round_trip_ms(self) -> float:
        return 0.0

    def maxmemory_policy(self) -> str | None:
        return "noeviction"

    def ledger_value(self, schedule_id: str) -> str | None:
        return self.server.ticks.get(schedule_id)

    def decisions(self, schedule_ids: Sequence[str]) -> dict[str, LastDecision]:
        decided = {sid: decision_of(self.server.ticks.get(sid)) for sid in schedule_ids}
        return {sid: d for sid, d in decided.items() if d is not None}

    def last_decisions(self) -> dict[str, LastDecision]:
        return precise(self.decisions(list(self.server.ticks)), self.history(limit=RECENT))

    def _entries(self) -> list[HistoryEntry]:
        """The history, oldest first."""
        return [
            HistoryEntry(
                entry_id=h.entry_id,
                schedule_id=h.schedule_id,
                tick_ms=h.tick_ms,
                outcome=h.outcome,
                at_ms=h.at_ms,
                epoch=int(h.epoch) if h.epoch.isdigit() else None,
                detail=h.detail,
                message_id=h.message_id,
                who=h.who,
            )
            for h in self.server.history
        ]

    def history(self, *, limit: int, match: set[str] | None = None) -> list[HistoryEntry]:
        return [e for e in reversed(self._entries()) if matches(e, match)][:limit]

    def schedule_history(
        self, schedule_id: str, *, limit: int, before: str | None = None, scan: int = 2500
    ) -> HistoryPage:
        entries = list(reversed(self._entries()))
        if before is not None:
            entries = [e for e in entries if _event_key(e.entry_id) < _event_key(before)]
        found = [e for e in entries if e.schedule_id == schedule_id]
        more = len(found) > limit
        return HistoryPage(entries=found[:limit], older=found[limit - 1].entry_id if more else None, scanned=0)

    def history_since(self, start_ms: int) -> Iterator[HistoryEntry]:
        return iter([e for e in self._entries() if e.at_ms >= start_ms])

    def history_reach(self, start_ms: int) -> int | None:
        if not self.server.history_trimmed or not self.server.history:
            return None
        first = self.server.history[0].at_ms
        return first if first > start_ms else None

    def record(
        self,
        action: str,
        *,
        who: str,
        entries: Sequence[tuple[str, str]],
        tick_ms: int | None = None,
        message_id: str = "",
    ) -> int:
        s = self.server
        now = s.now_ms()
        fields = s.lease_fields()
        epoch = fields.get("epoch", "") if fields else ""
        for schedule_id, detail in entries:
            tick = now if tick_ms is None else tick_ms
            record = HistoryRecord(schedule_id, tick, action, now, epoch, detail, message_id, who)
            s.append_history(self.history_length, record)
        return now

    def run_records(self, schedule_id: str, *, limit: int) -> list[str]:
        return MemoryRuns(self.server).runs_of(schedule_id, limit=limit)

    def pauses(self) -> dict[str, int | None]:
        return live_pauses(self.server.paused, self.server.paused_until, self.server.now_ms())

    def paused(self) -> set[str]:
        return set(self.pauses())

    def set_pause(self, member: str, until_ms: int | None) -> bool:
        s = self.server
        changed = member not in s.paused or s.paused_until.get(member) != until_ms
        s.paused.add(member)
        if until_ms is None:
            s.paused_until.pop(member, None)
        else:
            s.paused_until[member] = until_ms
        return changed

    def clear_pause(self, member: str) -> bool:
        s = self.server
        s.paused_until.pop(member, None)
        if member not in s.paused:
            return False
        s.paused.discard(member)
        return True

    def backfill_marks(self, schedule_id: str, ticks: Sequence[int]) -> dict[int, str]:
        marks = self.server.backfilled.get(schedule_id, {})
        return {t: marks[t] for t in ticks if t in marks}

    def claim_backfill(
        self, schedule_id: str, *, bound_ms: int | None, revision: int, ticks: Sequence[int], token: str
    ) -> tuple[bool, int, list[int]]:
        s = self.server
        now = s.now_ms()
        if revision > 0 and s.runtime_revs.get(schedule_id) != revision:
            return False, now, []
        entry = _parse_entry(s.ticks.get(schedule_id))
        bound = min(now, *(b for b in (entry and entry[0], bound_ms) if b is not None))
        marks = s.backfilled.setdefault(schedule_id, {})
        mine = f"c|{token}"
        out = []
        for tick in ticks:
            if tick > bound:
                out.append(2)
            else:
                out.append(1 if marks.setdefault(tick, mine) == mine else 0)
        return True, now, out

    def settle_backfill(
        self, schedule_id: str, *, token: str, sent: Sequence[tuple[int, str]], unsent: Sequence[int]
    ) -> None:
        s = self.server
        marks = s.backfilled.get(schedule_id, {})
        mine = f"c|{token}"
        now = s.now_ms()
        for tick, message_id in sent:
            if marks.get(tick) == mine:
                marks[tick] = "e"
                record = HistoryRecord(schedule_id, tick, Outcome.BACKFILLED.value, now, "", "backfill", message_id)
                s.append_history(self.history_length, record)
        for tick in unsent:
            if marks.get(tick) == mine:
                del marks[tick]


class MemoryRuntimeSchedules(RuntimeSchedules):
    """Runtime schedule definitions on a :class:`MemoryServer`: the calls
    of :class:`~.runtime.RuntimeSchedules` (``add``, ``add_many``,
    ``update``, ``remove``, ``get``, ``list``, ``ids``, ``get_many``,
    ``count_by_actor``, ``version``), checked by the same rules, on the
    server's clock.  Parameters as :class:`~.runtime.RuntimeSchedules`'s,
    with the server in place of the client and keys."""

    def __init__(
        self,
        server: MemoryServer,
        *,
        resolve_actor: Callable[[object], ActorInfo],
        timezone: str = "UTC",
        catch_up: CatchUp = "each",
        catch_up_window: int = DEFAULT_CATCH_UP_WINDOW,
        history_length: int = 10_000,
    ) -> None:
        # Not RuntimeSchedules.__init__: no client and no scripts; only the checks are shared.
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.resolve_actor = resolve_actor
        self.timezone = timezone
        self.catch_up: CatchUp = catch_up
        self.catch_up_window = catch_up_window
        self.history_length = history_length
        self.server = server
        self._stored: dict[str, RuntimeSchedule] = {}

    def _current(self) -> dict[str, RuntimeSchedule]:
        """The stored schedules, less the one-shots the leader retired."""
        for sid in [sid for sid in self._stored if sid not in self.server.runtime]:
            del self._stored[sid]
        return self._stored

    def _write_prepared(
        self, prepared: Sequence[tuple[BoundSchedule, str]], condition: str
    ) -> builtins.list[RuntimeSchedule]:
        for bound, _ in prepared:
            before = self._current().get(bound.id)
            if condition == "new" and before is not None:
                raise already_exists(bound.id)
            if condition not in ("", "new") and (before is None or str(before.schedule.revision) != condition):
                raise CronScheduleError(f"runtime schedule {bound.id!r} changed while being updated; try again")
        now = self.server.now_ms()
        out = []
        for schedule in self.server.add_runtime([bound for bound, _ in prepared], history_length=self.history_length):
            before = self._stored.get(schedule.id)
            stored = RuntimeSchedule(
                schedule=schedule,
                created_ms=now if before is None else before.created_ms,
                updated_ms=now,
                as_of_ms=now,
                revision=1 if before is None else before.revision + 1,
            )
            self._stored[schedule.id] = stored
            out.append(stored)
        return out

    def remove(self, actor: object, name: str) -> bool:
        sid = schedule_id_of(actor, name)
        self.server.remove_runtime(sid)
        return self._stored.pop(sid, None) is not None

    def get(self, actor: object, name: str) -> RuntimeSchedule | None:
        found = self._current().get(schedule_id_of(actor, name))
        return None if found is None else dataclasses.replace(found, as_of_ms=self.server.now_ms())

    def list(
        self, *, actor: object | None = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise CronScheduleError(f"runtime schedules: limit must be an int from 1 to 10000, got {limit!r}")
        owner = None if actor is None else getattr(actor, "actor_name", actor)
        ids = sorted(i for i in self._current() if owner is None or i.partition(":")[0] == owner)
        total = None if search is not None else len(ids)
        ids = [i for i in ids if (search is None or search.lower() in i.lower()) and (cursor is None or i > cursor)]
        page = ids[:limit]
        now = self.server.now_ms()
        items = [dataclasses.replace(self._stored[i], as_of_ms=now) for i in page]
        return RuntimePage(items=items, cursor=page[-1] if len(ids) > limit else None, total=total)

    def ids(self) -> builtins.list[str]:
        return sorted(self._current())

    def get_many(self, schedule_ids: Sequence[str]) -> builtins.list[RuntimeSchedule]:
        current = self._current()
        return [current[i] for i in schedule_ids if i in current]

    def version(self) -> int:
        return self.server.runtime_version

    def count_by_actor(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for sid in sorted(self._current()):
            actor = sid.partition(":")[0]
            out[actor] = out.get(actor, 0) + 1
        return out


def _event_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


if TYPE_CHECKING:

    def _operator_conforms(operator: MemoryOperator) -> OperatorStore:
        return operator

    def _conforms(store: InMemoryStore) -> Store:
        return store  # mypy checks the protocol here

    def _runs_conform(runs: MemoryRuns) -> RunStore:
        return runs

    def _redis_runs_conform(runs: RedisRuns) -> RunStore:
        return runs
