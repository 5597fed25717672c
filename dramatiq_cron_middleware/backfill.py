"""Backfill: enqueue the past ticks of a schedule in ``[start, end)`` once.

An operator's action, like a manual trigger, with one difference: each
tick is claimed in the store first (``OperatorStore.claim_backfill``) and
settled after its enqueue (``settle_backfill``), so two
backfills of the same range, or a backfill interrupted and run again,
enqueue each tick once.  A backfill claims only ticks at or before the
schedule's ledger entry, which the leader never decides again; the ticks
after it are the leader's (it catches them up or records them missed).
See docs/design.md, "Backfill".
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from dramatiq import Broker, Message

from .errors import CronScheduleError
from .schedules.instants import instant_ms as parse_instant
from .schedules.planner import message_for, message_id_for
from .schedules.schedule import BoundSchedule
from .store.abc import OperatorStore
from .store.codes import RESULT_OUTCOMES, ClaimResult, Outcome, parse_ledger_value
from .times import iso

__all__ = ["DEFAULT_MAX_TICKS", "LISTED", "Backfill", "BackfillPlan", "BackfillReport", "Ticks", "instant_ms"]

#: How many ticks a backfill enqueues at most unless told otherwise.
DEFAULT_MAX_TICKS = 10_000
#: Ticks claimed per script call: the ticks a kill -9 between a claim and
#: its settlement can lose (shown as unconfirmed to the next run).
_BATCH = 100
#: History outcomes that mean a tick's message was sent.
_SENT = frozenset(str(o) for o in (Outcome.FIRED, Outcome.CAUGHT_UP, Outcome.BACKFILLED))
#: A backfill's message ids are their own (a re-run of a fired tick is a
#: new message), and the same in every process.
_ID_SPACE = "backfill"


@dataclasses.dataclass
class Ticks:
    """A range's ticks by what a backfill does with them: ``ticks`` to
    enqueue, oldest first; the others are left out: ``fired`` (the ledger
    or the history shows them fired, triggered or backfilled),
    ``unconfirmed`` (claimed by a backfill that has not settled them: still
    running, or killed between its claim and its settlement, so they may
    be lost), ``unknown`` (older than the history reaches: whether they
    fired cannot be told), ``leaders`` (after the schedule's ledger entry,
    or not yet due: the leader's to decide)."""

    ticks: list[int] = dataclasses.field(default_factory=list)
    fired: list[int] = dataclasses.field(default_factory=list)
    unconfirmed: list[int] = dataclasses.field(default_factory=list)
    unknown: list[int] = dataclasses.field(default_factory=list)
    leaders: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Known:
    """What the ledger and the history said when the plan was made."""

    limit: int
    sent: frozenset[int]
    reach: int | None
    include_fired: bool


@dataclasses.dataclass(kw_only=True)
class BackfillPlan(Ticks):
    """What a backfill would do, decided before anything is claimed: the
    range's ticks sorted as :class:`Ticks` says.  ``total`` is how many
    ticks the range holds.  A plan made without a limit (``max_ticks=None``)
    is ``streamed``: its lists are empty, and :meth:`Backfill.run` sorts the
    ticks a thousand at a time as it claims them, so a range of millions
    starts at once, in little memory."""

    schedule: BoundSchedule
    start_ms: int
    end_ms: int
    #: The ledger entry's tick the plan was read against (None: no entry).
    bound_ms: int | None
    total: int
    streamed: bool = False
    known: _Known | None = dataclasses.field(default=None, repr=False, compare=False)


@dataclasses.dataclass
class BackfillReport:
    """What a backfill did: the ticks it ``enqueued``, those another
    backfill claimed meanwhile (``claimed_before``), and those found to be
    the leader's at the claim; of a streamed plan also the ticks it left
    out (``left_out``).  Each list holds its first :data:`LISTED` ticks;
    ``counts`` has how many there were of each."""

    plan: BackfillPlan
    enqueued: list[int] = dataclasses.field(default_factory=list)
    claimed_before: list[int] = dataclasses.field(default_factory=list)
    leaders: list[int] = dataclasses.field(default_factory=list)
    left_out: Ticks = dataclasses.field(default_factory=Ticks)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, field: str, ticks: list[int], into: list[int]) -> None:
        """Count ``ticks`` under ``field``, listing the first few."""
        self.counts[field] = self.counts.get(field, 0) + len(ticks)
        into.extend(ticks[: max(0, LISTED - len(into))])


#: How many ticks of each kind a report lists (all are counted).
LISTED = DEFAULT_MAX_TICKS
#: Ticks sorted per read of their backfill marks, in a streamed backfill.
_CHUNK = 1000


class Backfill:
    """Plan and run backfills of one scheduler.

    Parameters:
      store: The scheduler's store (its operator half).
      prefix: The scheduler's key prefix (message ids derive from it).
    """

    def __init__(self, store: OperatorStore, *, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def plan(
        self,
        schedule: BoundSchedule,
        *,
        start_ms: int,
        end_ms: int,
        include_fired: bool = False,
        max_ticks: int | None = DEFAULT_MAX_TICKS,
    ) -> BackfillPlan:
        """The ticks of ``schedule`` in ``[start_ms, end_ms)`` a backfill
        would enqueue, and why the others are left out; with ``max_ticks``
        None, a streamed plan (see :class:`BackfillPlan`).  The range's
        ticks are counted, not listed, before anything else.

        Raises:
          CronScheduleError: a reversed or empty range, a range starting
            after Redis's time, or more than ``max_ticks`` ticks in it
            (saying how many, and from when to when).
        """
        where = f"backfill of {schedule.id}"
        if end_ms <= start_ms:
            raise CronScheduleError(
                f"{where}: the range must end after it starts, got --from {iso(start_ms)} --to {iso(end_ms)}"
            )
        now = self.store.server_ms()
        if start_ms > now:
            raise CronScheduleError(
                f"{where}: the range starts at {iso(start_ms)}, after Redis's time ({iso(now)}): nothing is past yet"
            )
        total = schedule.cadence.count_between(start_ms, end_ms)
        if max_ticks is not None and total > max_ticks:
            first, last = schedule.next_after(start_ms - 1), schedule.last_before(end_ms)
            raise CronScheduleError(
                f"{where}: [{iso(start_ms)}, {iso(end_ms)}) holds {total:,} ticks, from {iso(first)} to "
                f"{iso(last)}: more than {max_ticks}; narrow the range, or allow more (--max N, or --yes for no limit)"
            )
        # The ledger first, then the history: every tick decided by the
        # time of the ledger read has its history entry in by then.
        value = self.store.ledger_value(schedule.id)
        parsed = parse_ledger_value(value) if value is not None else None
        bound = parsed.tick_ms if parsed is not None else None
        sent, reach = self._sent(schedule, start_ms)
        if parsed is not None and not parsed.baseline and parsed.result is not None:
            if _outcome_of_result(parsed.result) in _SENT:
                sent.add(parsed.tick_ms)
        known = _Known(min(now, bound) if bound is not None else now, frozenset(sent), reach, include_fired)
        plan = BackfillPlan(
            schedule=schedule,
            start_ms=start_ms,
            end_ms=end_ms,
            bound_ms=bound,
            total=total,
            streamed=max_ticks is None,
            known=known,
        )
        if not plan.streamed:
            self._sort(schedule, list(_ticks(schedule, start_ms, end_ms, total)), known, into=plan)
        return plan

    def listed(self, plan: BackfillPlan) -> BackfillPlan:
        """A streamed plan with its lists filled in (a dry run shows every
        tick: as long as the range is); another plan as it is."""
        if not plan.streamed:
            return plan
        assert plan.known is not None
        out = dataclasses.replace(plan, streamed=False, ticks=[], fired=[], unconfirmed=[], unknown=[], leaders=[])
        ticks = _ticks(plan.schedule, plan.start_ms, plan.end_ms, plan.total)
        while chunk := list(itertools.islice(ticks, _CHUNK)):
            self._sort(plan.schedule, chunk, plan.known, into=out)
        return out

    def _sort(self, schedule: BoundSchedule, ticks: list[int], known: _Known, *, into: Ticks) -> None:
        """Sort ``ticks`` (oldest first) as :class:`Ticks` says, into ``into``."""
        marks = self.store.backfill_marks(schedule.id, ticks)  # c|<run> claimed, e enqueued
        out = Ticks()
        for tick in ticks:
            if tick > known.limit:
                out.leaders.append(tick)
            elif marks.get(tick, "").startswith("c"):
                out.unconfirmed.append(tick)
            elif tick in known.sent or tick in marks:
                out.fired.append(tick)
            elif known.reach is not None and tick < known.reach and not known.include_fired:
                out.unknown.append(tick)
            else:
                out.ticks.append(tick)
        if known.include_fired:  # what a backfill enqueued already stays left out
            again = [tick for tick in out.fired if tick not in marks]
            out.ticks = sorted([*out.ticks, *again])
            out.fired = [tick for tick in out.fired if tick in marks]
        for field in dataclasses.fields(Ticks):
            getattr(into, field.name).extend(getattr(out, field.name))

    def _batches(self, plan: BackfillPlan, report: BackfillReport) -> Iterator[list[int]]:
        """The plan's ticks to enqueue, a claim's batch at a time; a
        streamed plan's sorted a chunk at a time, what it leaves out
        counted in the report."""
        if not plan.streamed:
            for first in range(0, len(plan.ticks), _BATCH):
                yield plan.ticks[first : first + _BATCH]
            return
        assert plan.known is not None
        ticks = _ticks(plan.schedule, plan.start_ms, plan.end_ms, plan.total)
        while chunk := list(itertools.islice(ticks, _CHUNK)):
            sorted_ = Ticks()
            self._sort(plan.schedule, chunk, plan.known, into=sorted_)
            for field in ("fired", "unconfirmed", "unknown"):
                report.add(field, getattr(sorted_, field), getattr(report.left_out, field))
            report.add("leaders", sorted_.leaders, report.leaders)
            for first in range(0, len(sorted_.ticks), _BATCH):
                yield sorted_.ticks[first : first + _BATCH]

    def run(
        self,
        broker: Broker,
        plan: BackfillPlan,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> BackfillReport:
        """Claim and enqueue the plan's ticks, in batches of 100: each tick
        is claimed once, whoever runs the same backfill, then enqueued
        through ``broker.enqueue`` (its ``before_enqueue``/``after_enqueue``
        hooks run as for any tick), then settled: recorded ``backfilled``
        in the history if it went out, released for the next run if not.
        ``progress(done, total)`` is told of each batch decided.

        Raises:
          CronScheduleError: the runtime schedule was removed or replaced
            since the plan (nothing more is claimed).
          redis.RedisError: Redis did not answer.
          Exception: whatever ``broker.enqueue`` raised (the batch settled
            first: a rerun enqueues the rest).
        """
        report = BackfillReport(plan)
        schedule = plan.schedule
        token = uuid.uuid4().hex
        total = plan.total if plan.streamed else len(plan.ticks)
        for batch in self._batches(plan, report):
            messages = {tick: self.message(schedule, tick) for tick in batch}
            same, server_ms, results = self.store.claim_backfill(
                schedule.id, bound_ms=plan.bound_ms, revision=schedule.revision, ticks=batch, token=token
            )
            if not same:
                raise CronScheduleError(
                    f"backfill of {schedule.id}: the runtime schedule was removed or replaced meanwhile; "
                    f"{report.counts.get('enqueued', 0)} tick(s) were enqueued before"
                )
            claimed = [t for t, r in zip(batch, results, strict=True) if r == 1]
            report.add(
                "claimed_before", [t for t, r in zip(batch, results, strict=True) if r == 0], report.claimed_before
            )
            report.add("leaders", [t for t, r in zip(batch, results, strict=True) if r == 2], report.leaders)
            confirmed: list[int] = []
            try:
                for tick in claimed:
                    broker.enqueue(messages[tick].copy(message_timestamp=server_ms))
                    confirmed.append(tick)
            finally:
                # Also when the enqueue fails or Ctrl+C interrupts: what went
                # out is recorded, the rest released for the next run.
                report.add("enqueued", confirmed, report.enqueued)
                unsent = [t for t in claimed if t not in set(confirmed)]
                sent = [(t, messages[t].message_id) for t in confirmed]
                self.store.settle_backfill(schedule.id, token=token, sent=sent, unsent=unsent)
            if progress is not None:
                decided = sum(report.counts.get(k, 0) for k in ("enqueued", "claimed_before", "leaders"))
                left = sum(report.counts.get(k, 0) for k in ("fired", "unconfirmed", "unknown"))
                progress(min(decided + left, total) if plan.streamed else decided, total)
        return report

    def message(self, schedule: BoundSchedule, tick_ms: int) -> Message[Any]:
        """A backfilled tick's message: the schedule's message for the tick,
        marked ``cron_backfill``, with an id of its own derived from
        (prefix, schedule, tick)."""
        message = message_for(schedule, tick_ms, prefix=self.prefix)
        options = {**message.options, "cron_backfill": True}
        message_id = message_id_for(schedule.id, tick_ms, prefix=f"{self.prefix}|{_ID_SPACE}")
        return message.copy(options=options, message_id=message_id)

    def _sent(self, schedule: BoundSchedule, start_ms: int) -> tuple[set[int], int | None]:
        """The ticks the history shows as sent (fired, caught up,
        backfilled, or stood in for by a manual trigger) since
        ``start_ms``, and how far back the history reaches (None: to
        before ``start_ms``, so nothing older matters)."""
        sent: set[int] = set()
        reach = self.store.history_reach(start_ms)
        for entry in self.store.history_since(start_ms):
            if entry.schedule_id != schedule.id:
                continue
            if entry.outcome == Outcome.TRIGGERED:
                # A manual trigger stands in for the tick before it.
                try:
                    sent.add(schedule.last_before(entry.tick_ms + 1))
                except CronScheduleError:
                    pass
            elif entry.outcome in _SENT:
                sent.add(entry.tick_ms)
        return sent, reach


def instant_ms(value: object, *, what: str) -> int:
    """An instant (see :func:`..schedules.instants.instant_ms`) in epoch ms.

    Raises:
      CronScheduleError: naming ``what`` and the value.
    """
    try:
        return parse_instant(value)
    except ValueError as exc:
        raise CronScheduleError(f"{what}: {exc}") from None


def _ticks(schedule: BoundSchedule, start_ms: int, end_ms: int, at_most: int) -> Iterator[int]:
    return itertools.islice(schedule.cadence.ticks_between(start_ms - 1, end_ms - 1), at_most)


def _outcome_of_result(result: int) -> str:
    try:
        return str(RESULT_OUTCOMES[ClaimResult(result)])
    except (KeyError, ValueError):
        return "unknown"
