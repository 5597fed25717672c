"""Run monitoring's storage on a :class:`~.server.MemoryServer`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..runs import ALERTS_CAP, ALIVE_MS, HealthRead, HealthWrite, RunEvent
from .server import MemoryServer, event_key

__all__ = ["MemoryRuns"]


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
            after = event_key(cursor)
            events = [e for e in server.run_events if event_key(e.entry_id) > after][:max_events]
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
        after = event_key(cursor)
        return any(event_key(e.entry_id) > after for e in self.server.run_events)

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

    def _put(self, schedule_id: str, tick: int, record: dict[str, Any]) -> None:
        kept = self.server.runs.setdefault(schedule_id, {})
        kept[tick] = record
        for old in sorted(kept)[: max(len(kept) - self.run_history, 0)]:
            del kept[old]
        if tick == max(kept):
            self.server.runs_last[schedule_id] = record
