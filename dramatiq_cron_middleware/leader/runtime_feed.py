"""The runtime feed: how the leader learns of runtime schedules.

On a takeover it reads every definition (``load_all``, then the changes
written during the scan).  While it leads, every write and removal pushes
a notification onto ``{p}:runtime:notify``, which the idle leader blocks
on (with a stop on its own wake-up list): a change is read when notified,
by one ``GET`` of the version counter and the changed definitions only
when the counter moved.  A leader too busy to block reads the counter
every :data:`RUNTIME_POLL` seconds instead.  It applies what it learns to
the tick queue: an added or replaced schedule is synced alone (fenced: it
continues from its ledger entry, as its write left it) and joins the
queue, a removed one leaves.  A follower holds no runtime schedules.

One-shots (``at=``) whose tick was decided are removed by the leader once
``one_shot_retention`` has passed since their instant (a conditional
removal: still at the revision it knows, its ledger entry at the instant
or after), so ``list`` shows them as done until then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..schedules.schedule import NEVER, BoundSchedule
from ..store.abc import LedgerStore, RuntimeReads
from ..store.clock import ServerClock
from ..store.keys import Keys
from ..store.ledger import SyncEntry
from .declared import Declared
from .reports import OnceReports
from .tick_queue import TickQueue

__all__ = ["RUNTIME_POLL", "RuntimeFeed"]

#: How stale a busy leader's view may grow: when it has not waited on the
#: notification list for this long, it reads the version counter (one GET).
#: A change takes effect within this long plus a round trip.
RUNTIME_POLL = 0.5


class RuntimeFeed:
    """The leader's view of the runtime schedule store.

    Parameters:
      store: The runtime schedule store.
      keys: The key names (where runtime writes notify the leader).
      queue: The leader's tick queue.
      ledger: The fenced ledger (an added schedule is synced alone).
      declared: The declared schedules (kept when the runtime set is
        dropped; runtime ids never collide with them) and actors (a
        runtime schedule of another actor fires too, with one WARNING).
      clock: The leader's clock.
      report_once: The leader's reports (one WARNING per finding).
      one_shot_retention_ms: How long after its instant a decided one-shot
        stays listed as done before the leader removes it.  Defaults to
        one day.
    """

    def __init__(
        self,
        store: RuntimeReads,
        *,
        keys: Keys,
        queue: TickQueue,
        ledger: LedgerStore,
        declared: Declared,
        clock: ServerClock,
        report_once: OnceReports,
        one_shot_retention_ms: int = 86_400_000,
    ) -> None:
        self.store = store
        self.keys = keys
        self.queue = queue
        self.ledger = ledger
        self.declared = dict(declared.schedules)
        self._knows = declared.knows
        self.clock = clock
        self.report_once = report_once
        #: The store's version the queue is up to date with; None: read all.
        self.version: int | None = None
        #: When the store was last known unchanged (monotonic seconds).
        self.checked = 0.0
        #: A change was notified and is not read yet.
        self.pending = False
        self.one_shot_retention_ms = one_shot_retention_ms
        #: The one-shots among the runtime schedules, and when the first
        #: of them may be retired (server ms).
        self._one_shots: dict[str, BoundSchedule] = {}
        self._retire_at = NEVER

    @property
    def stale(self) -> bool:
        """Whether every definition must be read again (a takeover, a wipe)."""
        return self.version is None

    @property
    def notify_key(self) -> str:
        """The list every runtime schedule write pushes a notification onto."""
        return self.keys.runtime_notify

    def notified(self, popped: str | None) -> None:
        """The leader's blocking wait ended with ``popped`` (the key popped
        from, None on timeout).  A notification means changes to read at
        the next :meth:`follow`; a timeout means none was written while it
        waited, as good as a read of the version counter."""
        if popped == self.notify_key:
            self.pending = True
        elif popped is None:
            self.checked = self.clock.monotonic()

    def renewed(self, version: int | None) -> None:
        """A renewal read the store's ``version``: a change this leader was
        not notified of (a lost notification, a writer of a version that
        only pushed the list) is read at the next :meth:`follow`."""
        if None not in (version, self.version) and version != self.version:
            self.pending = True

    def forget(self) -> None:
        """Drop the runtime schedules from the queue (leadership lost or
        about to be taken anew): they are read again in full."""
        self.queue.replace_all(self.declared)
        self.version = None
        self._one_shots.clear()
        self._retire_at = NEVER

    def reload(self) -> None:
        """Read every definition into the queue (out of sync: the leader
        syncs next).  The old set goes first, so that two large sets never
        live side by side."""
        self.forget()
        version, loaded = self.store.load_all()
        version, changed = self.store.changes_since(version)
        current = [s for s in {**loaded, **changed}.values() if s is not None]
        self.queue.replace_all({**self.declared, **{s.id: s for s in current}})
        self._track(current, ())
        self.version = version
        self.checked = self.clock.monotonic()
        self.pending = False
        self._report_undeclared(current)

    def follow(self, token: str, epoch: int) -> None:
        """While leading: apply what changed since the known version, when
        notified of a change or when the store was not known unchanged for
        :data:`RUNTIME_POLL` seconds (one ``GET`` when nothing changed)."""
        known = self.version
        if known is None:
            self.reload()
            return
        if self.clock.now_ms() >= self._retire_at:
            self._retire()
        now = self.clock.monotonic()
        if not self.pending and now - self.checked < RUNTIME_POLL:
            return
        if self.store.version() == known:
            self.checked, self.pending = now, False
            return
        version, changes = self.store.changes_since(known)
        if version < known:  # the store was wiped: read it all again
            self.reload()
            return
        # Applied before the version moves: if the fenced sync of a written
        # schedule fails, the same changes are read again at the next turn
        # (a schedule added then would otherwise be missing until a takeover).
        self._apply(token, epoch, changes)
        self.version = version
        self.checked, self.pending = now, False

    def _apply(self, token: str, epoch: int, changes: Mapping[str, BoundSchedule | None]) -> None:
        written: list[BoundSchedule] = []
        for sid, schedule in changes.items():
            if sid in self.declared:
                continue  # runtime ids never collide with declared ones
            if schedule is None:
                self.queue.discard(sid)
            else:
                written.append(schedule)
        self._track(written, [sid for sid, schedule in changes.items() if schedule is None])
        # An added or replaced schedule continues from its ledger entry,
        # which its write set (kept for a replacement with the same ticks,
        # moved to the write for a new one, a re-add or other ticks): read
        # it fenced, never guessed from the queue's old copy.
        if written and self.queue.in_sync:
            reply = self.ledger.sync(token, epoch, [SyncEntry.of(s) for s in written], expect_ledger=False)
            for schedule in written:
                self.queue.put(schedule, last=reply.ticks[schedule.id])
        else:
            for schedule in written:
                self.queue.put(schedule)  # known after the next full sync
        self._report_undeclared(written)

    def _track(self, written: Sequence[BoundSchedule], removed: Sequence[str]) -> None:
        """Keep the one-shots and when the first may be retired."""
        for sid in removed:
            self._one_shots.pop(sid, None)
        for schedule in written:
            if schedule.at is not None:
                self._one_shots[schedule.id] = schedule
            else:
                self._one_shots.pop(schedule.id, None)
        self._retire_at = min((self._retirement(s) for s in self._one_shots.values()), default=NEVER)

    def _retirement(self, schedule: BoundSchedule) -> int:
        return (schedule.at or 0) + self.one_shot_retention_ms

    def _retire(self) -> None:
        """Remove the one-shots decided and past their retention; the
        removals come back as changes, which drop them from the queue."""
        now = self.clock.now_ms()
        due = [s for s in self._one_shots.values() if self._retirement(s) <= now]
        done = [s for s in due if (self.queue.last(s.id) or -1) >= (s.at or 0)]
        for sid in self.store.retire(done) if done else ():
            self._one_shots.pop(sid, None)
        # One not decided yet (the queue out of sync, say) is looked at
        # again a second later.
        later = [self._retirement(s) for s in self._one_shots.values() if self._retirement(s) > now]
        again = [now + 1000] if len(done) < len(due) else []
        self._retire_at = min([*later, *again], default=NEVER)

    def _report_undeclared(self, schedules: Sequence[BoundSchedule]) -> None:
        for schedule in schedules:
            if not self._knows(schedule.actor_name):
                self.report_once(
                    f"undeclared:{schedule.id}",
                    "runtime schedule %s belongs to actor %r, which this app does not declare; it keeps firing "
                    "to queue %r (a rolling deploy may bring the actor back; remove it if not)",
                    schedule.id,
                    schedule.actor_name,
                    schedule.queue_name,
                )
