"""The shared state of the in-memory store: what Redis would hold."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import CronScheduleError
from ...schedules.schedule import BoundSchedule
from ..codes import Outcome, parse_entry
from ..operator import HistoryEntry
from ..runs import OUTBOXES, RunEvent

__all__ = ["LeaseRecord", "MemoryServer", "event_key", "parse_entry"]


@dataclasses.dataclass
class LeaseRecord:
    """The lease key: its fields and when it expires (epoch ms)."""

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
        self.lease_record: LeaseRecord | None = None
        self.epoch: int | None = None
        #: Schedule id -> ledger value (the grammar of protocol.py).
        self.ticks: dict[str, str] = {}
        self.shapes: dict[str, str] = {}
        self.history: list[HistoryEntry] = []
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
        if self.lease_record is not None and self.lease_record.expires_ms < self.now_ms():
            self.lease_record = None
        return None if self.lease_record is None else self.lease_record.fields

    def delete_lease(self) -> None:
        """DEL the lease (an operator, an eviction)."""
        self.lease_record = None

    def set_running(self, schedule_id: str, message_id: str, ttl_ms: int) -> None:
        """Set a schedule's running mark (``overlap="skip"``)."""
        self.running[schedule_id] = (message_id, self.now_ms() + ttl_ms)

    def is_running(self, schedule_id: str) -> bool:
        """Whether a schedule's running mark exists."""
        mark = self.running.get(schedule_id)
        if mark is not None and mark[1] < self.now_ms():
            del self.running[schedule_id]
            mark = None
        return mark is not None

    def batch(self, batch_id: str) -> str | None:
        record = self.batches.get(batch_id)
        if record is not None and record[1] < self.now_ms():
            del self.batches[batch_id]
            record = None
        return None if record is None else record[0]

    def add_history(
        self,
        history_length: int,
        sid: str,
        tick: int,
        outcome: str,
        at: int,
        epoch: int | None,
        detail: str,
        message: str,
        who: str = "",
    ) -> None:
        """Append to the history (with the next entry id), capped at ``history_length``."""
        self.history_seq += 1
        entry_id = f"{at}-{self.history_seq}"
        self.history.append(HistoryEntry(entry_id, sid, tick, outcome, at, epoch, detail, message, who))
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
                    self.add_history(history_length, sid, start, Outcome.REBASED.value, now, 0, why, "")
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


def event_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
