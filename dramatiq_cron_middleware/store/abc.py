"""The store protocol: what the leader needs from the place it coordinates in.

Three parts, each a :class:`typing.Protocol`: the :class:`LeaseStore` (one
candidate's handle on the shared lease), the :class:`LedgerStore` (the
fenced tick ledger) and the :class:`RuntimeReads` (what the leader reads of
the runtime schedules); :class:`Store` bundles them with the clock every
reply refreshes.  The types they speak are the leader's own
(:class:`~..lease.Acquired`, :class:`~..ledger.Claim`,
:class:`~..ledger.SyncReply`, :class:`~..protocol.ClaimResult`...).

Guarantees every implementation keeps (the contract suite checks them):

- **Fencing.** Every ledger write but :meth:`LedgerStore.register` checks,
  atomically with the write, that the lease holds the caller's token; a
  refused call writes nothing.
- **Once per tick.** A tick is decided only if it is newer than the
  schedule's last decided tick and not after the store's time; the epoch
  that decided it gets the same answer again, any other epoch a refusal.
- **Server time.** Every reply that carries the store's time (acquire,
  renew, sync, claim) is observed on :attr:`Store.clock` before the call
  returns.
- **Faults.** A call that cannot reach the store raises a connection error
  (``redis.ConnectionError`` or an :class:`OSError` such as
  :class:`ConnectionRefusedError`) and ran nowhere; a call whose reply was
  lost raises a timeout (``redis.TimeoutError`` or :class:`TimeoutError`)
  and may have run.  A lost claim reply is settled with
  :meth:`LedgerStore.settle`.
- **Durability.** A store that requires replicas raises
  :class:`~.durability.Unconfirmed` from ``acquire``, ``renew``, ``claim``
  and ``settle`` after the call ran when fewer replicas acknowledged it
  (each of them writes, so the acknowledgement is about that call): the
  caller treats it as a lost reply, a failed renewal or a failed
  acquisition.  Messages a claim stages (:attr:`LedgerStore.stages`) reach
  their queues only through :meth:`LedgerStore.publish`, once each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from ..schedules.schedule import BoundSchedule
from .boundary import Payload
from .clock import ServerClock
from .durability import Unconfirmed
from .keys import Keys
from .lease import Acquired, Held, Renewed
from .ledger import Claim, ClaimReply, Settled, SyncEntry, SyncReply
from .operator import Candidate, ForeignLock, HistoryEntry, HistoryPage, LastDecision, LeaderInfo
from .runs import HealthRead, HealthWrite
from .runtime import RuntimePage, RuntimeSchedule

__all__ = [
    "LeaseStore",
    "LedgerStore",
    "OperatorStore",
    "RunStore",
    "RuntimeDefinitions",
    "RuntimeReads",
    "Settled",
    "Store",
]


class LeaseStore(Protocol):
    """One candidate's handle on the shared lease.

    The lease holds a token and an epoch and expires ``ttl_ms`` after its
    last acquisition or renewal, on the store's clock.  The epoch counter
    grows by one on every new acquisition and never goes back, even when
    the counter itself is lost (it restarts above every epoch the ledger
    names).
    """

    #: The token this candidate holds the lease under, None while following.
    token: str | None
    #: The lease length, ms.
    ttl_ms: int
    #: Unique per handle: names the candidate's private wake-up list.
    candidate_id: str
    #: Shown to operators as the leader's identity.
    host: str
    pid: int
    #: The candidate's schedule set fingerprint and app version ("" when not given).
    fingerprint: str
    version: str

    def acquire(self) -> Acquired | Held:
        """Try once to take the lease: :class:`Acquired` with a new epoch when
        it was free, or when this handle already holds it (a retry after a
        lost reply finds the "ghost" lease its own, same epoch); otherwise
        :class:`Held` with the holder's token, renewal count and remaining
        time.  Also marks this candidate as seen now."""

    def renew(self) -> Renewed | None:
        """Extend the lease to a whole ``ttl_ms`` from now (never more: a
        retried renewal does not stretch it) if it still holds our token,
        answering ``(fingerprint, version)`` of every candidate seen within
        two leases (the mixed schedule set check needs no other round
        trip); None, and the local token forgotten, when it does not."""

    def release(self) -> bool:
        """Compare-and-delete the lease (also a token whose acquire reply
        was lost), wake the followers seen recently, and drop this
        candidate from the candidates; True when the lease was ours."""

    def forget(self) -> None:
        """Drop the local belief of leading; the store is not touched."""

    @property
    def release_token(self) -> str | None:
        """The token a release frees: :attr:`token`, else that of an
        acquisition whose reply was lost or not read yet (it may have won);
        None when neither.  Only reads attributes (a signal handler asks)."""

    def depose(self, token: str, field: str, seen: str) -> bool:
        """Delete the lease if it still holds ``token`` and its ``field``
        (``"seq"``: the renewal count; ``"conn"``: the presence connection)
        still reads ``seen``; True when deleted."""

    def report_replicas(self, unconfirmed: Unconfirmed | None) -> None:
        """Record for operators that this candidate's writes lack replica
        acknowledgements (``unconfirmed``), or with None that its
        writes are acknowledged again (the record is dropped)."""

    def depose_if_gone(self) -> bool:
        """Fast takeover: delete the lease if its holder registered a
        presence connection the store no longer knows; True when deleted."""

    def wait_for_release(self, timeout_ms: int) -> bool:
        """Wait until a release wakes the followers, :meth:`wake_self` is
        called, or ``timeout_ms`` passes; True when woken.  Each release
        wakes as many waiters as candidates were seen within two leases."""

    def wake_self(self) -> None:
        """Interrupt this candidate's own :meth:`wait_for_release` or
        :meth:`wait_for_push`."""

    def wait_for_push(self, key: str, timeout_ms: int, *, bound_ms: int) -> str | None:
        """Wait until ``key`` (the runtime change notification) or this
        candidate's own wake-up list is pushed, or ``timeout_ms`` passes;
        the key popped from, or None.  Never longer than ``bound_ms`` by the
        caller's own clock."""

    def hand_over_commands(self) -> list[tuple[Any, ...]]:
        """The release and a wake-up of this candidate's own waits, as raw
        commands for the shutdown hand-over's connection (see shutdown.py);
        only reads attributes (called from a signal handler)."""

    def publish_schedule_set(self, shapes: dict[str, str]) -> None:
        """Publish ``{schedule id: shape}`` under :attr:`fingerprint` (the
        first publication of a fingerprint wins; nothing without one)."""

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        """The published sets by fingerprint; None for one missing or unreadable."""

    def prune_schedule_sets(self, keep: set[str]) -> None:
        """Drop the published sets whose fingerprint is not in ``keep``."""


class LedgerStore(Protocol):
    """The fenced tick ledger: per schedule, the last decided tick and the
    epoch that decided it, the outcome history, and per claim batch its
    results (kept for a caller whose reply was lost)."""

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
        """Read every schedule's last decided tick, fenced.  A missing entry
        becomes a baseline (``BASELINE``), an unparsable one (``CORRUPT``)
        or one after the trusted now plus a tolerance (``FUTURE``) is
        replaced by a baseline and recorded as ``rebased``, and a declared
        schedule whose shape changed restarts (``RESHAPED``); a baseline
        lies at the earlier of ``now_ms`` and the store's now and carries
        ``epoch``.  With ``expect_ledger``, an empty ledger is reported
        (``ledger_lost``) and recorded once.  ``on_chunk`` gets the
        ``(id, tick)`` pairs as they arrive.

        Raises:
          NotLeader: the lease holds another token (nothing written).
        """

    def register(self, schedules: Sequence[SyncEntry]) -> int:
        """Unfenced: create the missing entries (a baseline at now under
        epoch 0) and the missing shapes; never touch
        an existing entry.  Returns how many entries were written."""

    def claim(
        self,
        token: str,
        epoch: int,
        batch_id: str,
        claims: Sequence[Claim],
        payloads: Sequence[Payload | None] | None = None,
    ) -> ClaimReply:
        """Decide a batch atomically, one :class:`ClaimResult` per claim:
        ``LOST`` (no usable entry: sync first), ``GONE`` (a runtime claim
        whose revision is no longer stored), ``NOT_YET`` (after the store's
        now), ``REFUSED`` (not newer than the last decided tick, unless this
        epoch decided that very tick: then its stored result again), else
        recorded: ``PAUSED`` (the schedule or its whole actor is paused),
        ``SKIPPED`` (its running mark exists, or an earlier claim of the
        batch set it), ``FIRE`` (sets the running mark when the claim has an
        overlap TTL) or ``RECORDED`` (``fire`` false).  Every recorded claim
        appends a history entry.  The results are kept under ``batch_id``;
        a batch id seen before answers its first results (even to a caller
        no longer leading), a voided one ``REFUSED`` for all.  ``payloads``
        (messages enqueued in the same step) are for a RedisBroker on the
        same Redis only.

        Raises:
          NotLeader: the lease holds another token (nothing written).
          BadRequest: the batch is malformed (nothing written).
        """

    @property
    def stages(self) -> bool:
        """Whether :meth:`claim` stages the messages it grants (durable
        claims) instead of pushing them: :meth:`publish` pushes them once
        replicas hold the claim."""

    def publish(self, payloads: Sequence[Payload]) -> list[bool]:
        """Push staged messages into their queues, each at most once
        whoever calls; per payload whether this call pushed it."""

    def staged(self, limit: int) -> list[Payload]:
        """Up to ``limit`` messages still staged (their claimer died or its
        publish failed)."""

    def settle(self, batch_id: str, *, epoch: int, claims: Sequence[Claim]) -> Settled:
        """Learn what became of a claim whose reply was lost: its results if
        it ran; otherwise void the batch, so a copy still in flight is
        refused whole, and answer None.  An unusable record is replaced by
        a void one and the results are read back from the ledger (what
        ``epoch`` decided of ``claims``)."""


class RuntimeReads(Protocol):
    """What the leader reads of the runtime schedules.  Every write or
    removal bumps a version counter; each id remembers the version of its
    last change (a removal stays as a tombstone)."""

    def version(self) -> int:
        """The version counter (0: nothing ever written, or wiped)."""

    def load_all(self) -> tuple[int, dict[str, BoundSchedule]]:
        """``(version, every stored schedule)``; the version is read first,
        so :meth:`changes_since` with it catches what changed meanwhile."""

    def changes_since(self, version: int) -> tuple[int, dict[str, BoundSchedule | None]]:
        """``(new version, {id: schedule as now, or None when removed})`` for
        every id changed after ``version``.  A new version below
        ``version`` means a wipe: the changes are empty, load everything."""

    def drop_stale(self, ticks: Sequence[tuple[BoundSchedule, int, str]]) -> list[bool]:
        """Of owed ticks ``(schedule, tick ms, message id)``, which to drop
        (True): those whose stored revision is no longer the schedule's;
        each dropped tick is recorded in the history as ``dropped``."""

    def retire(self, schedules: Sequence[BoundSchedule]) -> list[str]:
        """Remove one-shots that are done: each only if still at its
        revision and its ledger entry reached its ``at``; the ids removed."""


class RunStore(Protocol):
    """Run monitoring's storage (``runs.RedisRuns``, ``in_memory.MemoryRuns``):
    run records written by the workers, and the health the leader decides
    from them, fenced like the ledger.

    Guarantees (the contract suite checks them): a run record belongs to
    one delivery (a duplicate start of the same attempt is refused, a newer
    attempt wins); every recorded start or finish appends one event, read
    in order after the stored cursor; :meth:`write_health` writes nothing
    unless the lease holds the caller's token; the newest ``run_history``
    runs per schedule are kept.
    """

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
        """A worker's ``"start"`` or ``"finish"`` (with ``outcome`` and
        ``error``); False when the record belongs to another delivery."""

    def read_health(self, *, max_events: int, max_due: int, schedule_ids: Sequence[str] = ()) -> HealthRead:
        """The events after the cursor, the open runs past their deadline,
        and the stored facts of the schedules these and ``schedule_ids`` name."""

    def write_health(self, token: str, write: HealthWrite) -> bool:
        """Apply the leader's decisions if the lease holds ``token``."""

    def wait_for_event(self, cursor: str, timeout_ms: int) -> bool:
        """Wait (at most ``timeout_ms``) for an event after ``cursor``; True
        when there is one."""

    def keep_alive(self, members: Sequence[str]) -> None:
        """A worker's heartbeat for the runs it is running (``r|<tick>|<id>``):
        each counts as alive for ``runs.ALIVE_MS`` more."""

    def alerts(self, limit: int, *, outbox: str) -> list[str]:
        """The oldest ``limit`` alerts of an outbox (``runs.OUTBOXES``)."""

    def alert_delivered(self, alert: str, *, outbox: str) -> None:
        """Drop a delivered alert from an outbox."""


class Store(Protocol):
    """Everything the leader needs, for one candidate."""

    @property
    def keys(self) -> Keys:
        """The key names (reports name where a value lies)."""

    @property
    def clock(self) -> ServerClock:
        """Observes the store's time carried by every reply."""

    @property
    def lease(self) -> LeaseStore:
        """This candidate's lease handle."""

    @property
    def ledger(self) -> LedgerStore:
        """The fenced ledger."""

    @property
    def runtime(self) -> RuntimeReads | None:
        """The runtime schedules' reads; None: declared schedules only."""


class OperatorStore(Protocol):
    """The operator half (``operator.RedisOperator``, ``in_memory.MemoryOperator``):
    what operators read and write beside the leader, none of it fenced.

    Guarantees (the contract suite checks them): every write's entry carries
    the store's time, and :meth:`server_ms` is that clock; a pause whose end
    passed is no longer in :meth:`pauses`; a backfill tick is claimed by one
    run only, and only a tick at or before the schedule's last decided tick
    (and the store's now); a runtime schedule replaced or removed since the
    plan refuses the claim whole.
    """

    keys: Keys
    history_length: int

    def server_ms(self) -> int:
        """The store's time, epoch ms."""

    def leader(self) -> LeaderInfo | None:
        """The lease holder, None when the lease is free."""

    def replicas_record(self) -> dict[str, str]:
        """The record of the last candidate whose writes lacked replicas."""

    def candidates(self, *, since_ms: int) -> list[Candidate]:
        """Candidates seen at or after ``since_ms``, newest first."""

    def ineligible(self, *, since_ms: int) -> list[Candidate]:
        """Processes that may not lead seen at or after ``since_ms``."""

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        """The published schedule sets by fingerprint."""

    def round_trip_ms(self) -> float:
        """One round trip, ms."""

    def foreign_lock(self, key: str, *, delete_if: str | None = None) -> ForeignLock:
        """Another scheduler's lock key, deleted if ``delete_if`` holds it untouched."""

    def maxmemory_policy(self) -> str | None:
        """The eviction policy, None where unreadable."""

    def ledger_value(self, schedule_id: str) -> str | None:
        """A schedule's raw ledger value."""

    def decisions(self, schedule_ids: Sequence[str]) -> dict[str, LastDecision]:
        """The ledger entries of these schedules."""

    def last_decisions(self) -> dict[str, LastDecision]:
        """Every ledger entry, its outcome from the recent history where there."""

    def history(self, *, limit: int, match: set[str] | None = None) -> list[HistoryEntry]:
        """The newest ``limit`` entries (of ``match``'s ids or actors), newest first."""

    def schedule_history(
        self, schedule_id: str, *, limit: int, before: str | None = None, scan: int = 2500
    ) -> HistoryPage:
        """One schedule's entries older than ``before``, newest first."""

    def history_since(self, start_ms: int) -> Iterator[HistoryEntry]:
        """Every entry recorded at or after ``start_ms``, oldest first."""

    def history_reach(self, start_ms: int) -> int | None:
        """The oldest entry's time when trimming lost entries after ``start_ms``."""

    def record(
        self,
        action: str,
        *,
        who: str,
        entries: Sequence[tuple[str, str]],
        tick_ms: int | None = None,
        message_id: str = "",
    ) -> int:
        """Append ``action`` by ``who`` per ``(schedule id, detail)``; the store's time."""

    def run_records(self, schedule_id: str, *, limit: int) -> list[str]:
        """A schedule's newest run records, newest first, as stored."""

    def pauses(self) -> dict[str, int | None]:
        """The live pauses: member -> end (None: until resumed)."""

    def paused(self) -> set[str]:
        """The live paused members."""

    def set_pause(self, member: str, until_ms: int | None) -> bool:
        """Pause ``member`` until ``until_ms``; False when it already was so."""

    def clear_pause(self, member: str) -> bool:
        """Resume ``member``; False when it was not paused."""

    def backfill_marks(self, schedule_id: str, ticks: Sequence[int]) -> dict[int, str]:
        """The backfill marks of these ticks."""

    def claim_backfill(
        self, schedule_id: str, *, bound_ms: int | None, revision: int, ticks: Sequence[int], token: str
    ) -> tuple[bool, int, list[int]]:
        """``(revision still stored, store time, per tick 1/0/2)``."""

    def settle_backfill(
        self, schedule_id: str, *, token: str, sent: Sequence[tuple[int, str]], unsent: Sequence[int]
    ) -> None:
        """Record ``sent`` as backfilled, release ``unsent``."""


class RuntimeDefinitions(Protocol):
    """The runtime schedule definitions as operators write and read them
    (``runtime.RuntimeSchedules``, ``in_memory.MemoryRuntimeSchedules``),
    checked by one rule book (``bind_schedule``) on either store.

    Guarantees (the contract suite checks them): a write stores the whole
    definition with a new revision, or nothing; ``add_many(replace=False)``
    refuses a stored name; ``update`` keeps every option it is not given;
    a removal is final for its revision; ``list`` pages in id order.
    """

    def get(self, actor: object, name: str) -> RuntimeSchedule | None:
        """The stored schedule ``actor:name``, or None."""

    def add_many(self, items: Iterable[tuple[object, Any, str]], *, replace: bool = True) -> list[RuntimeSchedule]:
        """Store ``(actor, schedule, name)`` each, all checked first."""

    def update(self, schedule_id: str, changes: dict[str, Any]) -> tuple[RuntimeSchedule, RuntimeSchedule]:
        """Change some options; ``(before, after)``."""

    def remove(self, actor: object, name: str) -> bool:
        """Remove one; False when there was none."""

    def list(
        self, *, actor: object | None = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        """A page in id order."""

    def count_by_actor(self) -> dict[str, int]:
        """How many each actor has."""
