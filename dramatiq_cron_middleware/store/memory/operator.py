"""The operator half of the store on a :class:`~.server.MemoryServer`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..codes import Outcome
from ..keys import Keys
from ..lease import parse_schedule_set
from ..operator import (
    RECENT,
    Candidate,
    ForeignLock,
    HistoryEntry,
    HistoryPage,
    LastDecision,
    LeaderInfo,
    decision_of,
    live_pauses,
    matches,
    precise,
)
from .runs import MemoryRuns
from .server import MemoryServer, event_key, parse_entry

__all__ = ["MemoryOperator"]


class MemoryOperator:
    """The operator half of the store protocol (:class:`~..abc.OperatorStore`)
    on a :class:`MemoryServer`: what :class:`~..operator.RedisOperator` does
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
        #: Other schedulers' lock keys: key -> (holder, expiry in epoch ms or None).
        self.foreign: dict[str, tuple[str, int | None]] = {}

    def server_ms(self) -> int:
        return self.server.now_ms()

    def leader(self) -> LeaderInfo | None:
        fields = self.server.lease_fields()
        lease = self.server.lease_record
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

    def foreign_lock(self, key: str, *, delete_if: str | None = None) -> ForeignLock:
        holder, expires = self.foreign.get(key, (None, None))
        now = self.server.now_ms()
        if holder is None or (expires is not None and expires <= now):
            self.foreign.pop(key, None)
            return ForeignLock(None, -2)
        pttl = -1 if expires is None else expires - now
        if holder != delete_if:
            return ForeignLock(holder, pttl)
        del self.foreign[key]
        return ForeignLock(holder, pttl, deleted=True)

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

    def history(self, *, limit: int, match: set[str] | None = None) -> list[HistoryEntry]:
        return [e for e in reversed(self.server.history) if matches(e, match)][:limit]

    def schedule_history(
        self, schedule_id: str, *, limit: int, before: str | None = None, scan: int = 2500
    ) -> HistoryPage:
        entries = list(reversed(self.server.history))
        if before is not None:
            entries = [e for e in entries if event_key(e.entry_id) < event_key(before)]
        found = [e for e in entries if e.schedule_id == schedule_id]
        more = len(found) > limit
        return HistoryPage(entries=found[:limit], older=found[limit - 1].entry_id if more else None, scanned=0)

    def history_since(self, start_ms: int) -> Iterator[HistoryEntry]:
        return iter([e for e in self.server.history if e.at_ms >= start_ms])

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
            number = int(epoch) if epoch.isdigit() else None
            s.add_history(self.history_length, schedule_id, tick, action, now, number, detail, message_id, who)
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
        entry = parse_entry(s.ticks.get(schedule_id))
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
                outcome = Outcome.BACKFILLED.value
                s.add_history(self.history_length, schedule_id, tick, outcome, now, None, "backfill", message_id)
        for tick in unsent:
            if marks.get(tick) == mine:
                del marks[tick]
