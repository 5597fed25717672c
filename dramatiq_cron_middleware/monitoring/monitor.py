"""The leader side of run monitoring: health decided under the fenced lease.

A turn costs two round trips, whatever the number of schedules (no scan):
one read of what happened since the last turn (the run events after the
stored cursor, the open runs whose deadline passed, the stored facts of
the schedules these name), and, when something changed, one fenced write
of the new facts, the cursor, the open runs and the alerts.  The write
checks the lease token, so a deposed leader changes nothing, and the alert
is stored in the same atomic step as the change it announces: a new
leader carries on from the stored facts and cursor and re-sends nothing.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

from ..store.abc import RunStore
from ..store.runs import HealthWrite
from .health import Facts, Policy, announce, health_of
from .records import Alert

__all__ = ["HealthMonitor", "Turn"]

#: At most this many events, due deadlines and fired ticks are decided per
#: turn (a catch-up fires thousands at once); a backlog is worked off over
#: the next turns, each script kept to milliseconds.
BATCH = 500


@dataclasses.dataclass(frozen=True)
class Turn:
    """What a turn decided: the alerts it stored, whether more work was
    left for the next turn (a full batch), and when the next turn is due at
    the latest: the store's time, the events cursor reached, and the
    earliest deadline still ahead (None: none); and the health of every
    schedule it decided on (what the metrics export)."""

    alerts: list[Alert]
    more: bool
    written: bool
    now_ms: int = 0
    cursor: str = "0-0"
    next_deadline_ms: int | None = None
    health: dict[str, str] = dataclasses.field(default_factory=dict)


class HealthMonitor:
    """Decides every schedule's health from run events and deadlines.

    Parameters:
      store: Where the events, open runs and facts are.
      schedule: A schedule id's ``(actor, name, policy)`` (a schedule
        removed since falls back on defaults).
      outboxes: The alert outboxes each alert is stored in (``"on_alert"``,
        ``"webhook"``: the sinks configured).  Defaults to none.
    """

    def __init__(
        self,
        *,
        store: RunStore,
        schedule: Callable[[str], tuple[str, str | None, Policy]],
        outboxes: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.schedule = schedule
        self.outboxes = tuple(outboxes)
        self._lock = threading.Lock()
        # What the leader told, in order: ("fired" or "missed", id, tick).
        # The order matters: catch_up="latest" records the skipped ticks as
        # missed, then fires the latest, which ends the missed state.
        self._told: list[tuple[str, str, int | None]] = []
        #: Set whenever the leader tells something: an idle decide thread
        #: waits on it, not on Redis.
        self.told = threading.Event()

    # -- told by the leader thread (quick, never raises) ---------------------

    def fired(self, schedule_id: str, tick_ms: int) -> None:
        """A tick's message reached the broker."""
        with self._lock:
            self._told.append(("fired", schedule_id, tick_ms))
        self.told.set()

    def missed(self, schedule_id: str, tick_ms: int | None = None) -> None:
        """The ledger recorded a tick as missed."""
        with self._lock:
            self._told.append(("missed", schedule_id, tick_ms))
        self.told.set()

    def forget(self) -> None:
        """Leadership was lost: what was buffered is the next leader's to
        learn (a fired tick it did not see is not watched for lateness)."""
        with self._lock:
            self._told = []

    # -- one turn ------------------------------------------------------------

    def turn(self, token: str) -> Turn:
        """Read, decide and (fenced by ``token``) write; on a store error the
        buffered ticks are kept for the next turn and the error raised."""
        with self._lock:  # a bounded batch: a catch-up fires thousands at once
            told, self._told = self._told[:BATCH], self._told[BATCH:]
            self.told.clear()  # under the lock: what is told from now on sets it again
        try:
            turn = self._turn(token, told)
        except BaseException:
            with self._lock:
                self._told[:0] = told
            raise
        if not turn.more and self._told and turn.now_ms:  # (0: not leading)
            turn = dataclasses.replace(turn, more=True)
        return turn

    def _turn(self, token: str, told: list[tuple[str, str, int | None]]) -> Turn:
        named = list(dict.fromkeys(sid for _, sid, _ in told))
        read = self.store.read_health(max_events=BATCH, max_due=BATCH, schedule_ids=named)
        before = {sid: Facts.loads(text) for sid, text in read.facts.items()}
        facts = dict(before)
        # member -> new deadline, or None: removed (the last change wins).
        open_runs: dict[str, int | None] = {}
        marks: list[tuple[str, int, str]] = []

        def get(sid: str) -> Facts:
            return facts.get(sid) or Facts()

        for kind, sid, tick in told:
            if kind == "missed":
                facts[sid] = get(sid).was_missed(tick)
                continue
            assert tick is not None
            _, _, policy = self.schedule(sid)
            facts[sid] = get(sid).fired(tick)
            open_runs[_member("p", tick, sid)] = tick + policy.jitter_ms + policy.grace_ms
            marks.append((sid, tick, "pending"))
        for event in read.events:
            sid, tick = event.schedule_id, event.tick_ms
            if event.outcome != "dropped":  # a dropped message never ran: its deadline still decides
                open_runs[_member("p", tick, sid)] = None
            if event.kind == "start":
                _, _, policy = self.schedule(sid)
                facts[sid] = get(sid).started(tick)
                open_runs[_member("r", tick, sid)] = event.at_ms + policy.max_runtime_ms
            else:
                facts[sid] = get(sid).finished(tick, event.outcome, event.error)
                open_runs[_member("r", tick, sid)] = None
        for member, _deadline in read.due:
            if member in open_runs:
                continue  # started or finished meanwhile: that event decided it
            parsed = _parse_member(member)
            open_runs[member] = None
            if parsed is None:
                continue
            kind, tick, sid = parsed
            if kind == "h":  # a change held back (announce) is due: decide again
                facts[sid] = get(sid)
                continue
            facts[sid] = get(sid).overdue(tick, running=kind == "r")
            if kind != "r":
                continue
            lapse = read.alive.get(member)
            if lapse is not None:  # its worker still runs it: running long, not lost
                open_runs[member] = lapse  # looked at again when the heartbeat would lapse
            else:
                marks.append((sid, tick, "lost"))
        alerts: list[Alert] = []
        changed: dict[str, str] = {}
        decided: dict[str, str] = {}
        for sid, new in facts.items():
            actor, name, policy = self.schedule(sid)
            old = before.get(sid) or Facts()
            health = health_of(new, policy)
            if health != old.health:
                new = dataclasses.replace(new, health=health, since_ms=read.now_ms)
            else:
                new = dataclasses.replace(new, health=old.health, since_ms=old.since_ms)
            new, previous, wake = announce(new, read.now_ms, policy.alert_for_ms)
            if previous is not None:
                alerts.append(
                    Alert(
                        schedule_id=sid,
                        actor=actor,
                        name=name,
                        state=new.health,
                        previous=previous,
                        tick_ms=new.tick_ms,
                        at_ms=read.now_ms,
                        error=new.error if new.health == "failing" else None,
                    )
                )
            hold = _member("h", 0, sid)
            if wake is not None:
                open_runs[hold] = wake
            elif old.trouble_since != new.trouble_since or old.announced != new.announced:
                open_runs.setdefault(hold, None)
            decided[sid] = new.health
            if new != old:
                changed[sid] = new.dumps()
        cursor = read.events[-1].entry_id if read.events else None
        write = HealthWrite(
            cursor=cursor,
            facts=changed,
            add={m: d for m, d in open_runs.items() if d is not None},
            remove=[m for m, d in open_runs.items() if d is None],
            runs=marks,
            alerts=[a.dumps() for a in alerts],
            outboxes=self.outboxes,
        )
        more = len(read.events) >= BATCH or len(read.due) >= BATCH
        ahead = [d for d in (read.next_deadline_ms, *write.add.values()) if d is not None and d > read.now_ms]
        turn = Turn(
            alerts=alerts,
            more=more,
            written=not write.empty,
            now_ms=read.now_ms,
            cursor=cursor or read.cursor,
            next_deadline_ms=min(ahead, default=None),
            health=decided,
        )
        if write.empty:
            return turn
        if not self.store.write_health(token, write):
            return Turn(alerts=[], more=False, written=False)  # not leading: nothing was written
        return turn


def _member(kind: str, tick_ms: int, schedule_id: str) -> str:
    """An open run's member: ``p`` (pending) or ``r`` (running), its tick,
    its schedule; or ``h|0|<schedule id>``: a change of health held back
    until it has lasted ``alert_for``."""
    return f"{kind}|{tick_ms}|{schedule_id}"


def _parse_member(member: str) -> tuple[str, int, str] | None:
    kind, _, rest = member.partition("|")
    tick, _, sid = rest.partition("|")
    try:
        return (kind, int(tick), sid) if kind in ("p", "r", "h") and sid else None
    except ValueError:
        return None
