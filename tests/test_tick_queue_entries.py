"""The tick queue holds at most one live entry per schedule, whatever
sequence of puts, discards, loads, takes and answers the leader makes: a
replaced schedule (same next tick or not) is planned once per batch, never
twice, and planning never fails.  In-process, on hand-given ledger answers;
the stateful test draws the sequences."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dramatiq_cron_middleware.leader.tick_queue import Planned, TickQueue
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, Schedule, schedules_for_actor
from dramatiq_cron_middleware.store.codes import ClaimResult
from tests.support.examples import examples
from tests.support.ticks import load

NOW = 1_800_000_000_000  # a whole minute


def schedule(actor: str, expression: str, **options: object) -> BoundSchedule:
    return schedules_for_actor(
        actor, "default", Schedule(expression, **options), timezone="UTC", catch_up="each", catch_up_window=300_000
    )[0]


def test_a_replacement_with_the_same_next_tick_is_planned_once() -> None:
    """Given a schedule in the queue, when it is put again with a last tick
    that gives the same next tick (a replaced runtime definition with new
    kwargs), then the next batch plans that tick once."""
    s = schedule("job", "* * * * * *")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW})
    queue.put(schedule("job", "* * * * * *", kwargs={"edited": True}), last=NOW + 400)
    batch = queue.take(NOW + 1000, 1000)
    assert [(p.schedule.id, p.claim.tick_ms) for p in batch] == [(s.id, NOW + 1000)]
    assert batch[0].schedule.kwargs == {"edited": True}


def test_a_schedule_removed_and_added_back_at_the_same_tick_is_planned_once() -> None:
    s = schedule("job", "* * * * * *")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW})
    queue.discard(s.id)
    queue.put(s, last=NOW)
    assert [p.claim.tick_ms for p in queue.take(NOW + 1000, 1000)] == [NOW + 1000]


def test_a_batch_is_the_same_whatever_the_processs_walks_already_know() -> None:
    """Given three schedules due at the same tick, loaded in an order other
    than their ids', when a batch too small for all of them is taken, then
    it holds the same schedule whether this process had walked their
    expression before (their next ticks known at once) or not (walked at
    the end of the load): the leader's batches, and the simulator's, are a
    function of what the leader was told, not of a process-wide cache.
    (Ties went by push order, and a known next tick is pushed earlier.)"""
    expression = "7-59/13 * * * * *"  # used by no other test: unwalked in this process
    first = [schedule(sid, expression) for sid in ("c", "b", "a")]
    last = {s.id: NOW - 60_000 for s in first}

    def batch() -> list[str]:
        queue = TickQueue({s.id: s for s in first}, prefix="p", now_ms=lambda: NOW)
        load(queue, last)
        return [p.schedule.id for p in queue.take(NOW, 1)]

    unwalked = batch()
    assert batch() == unwalked  # now walked: every next tick known during the load


# Two definitions per id: an edit that keeps the ticks, and one that moves them.
IDS = ("a", "b", "c")
VARIANTS = {
    sid: (
        schedule(sid, "* * * * * *"),
        schedule(sid, "* * * * * *", kwargs={"edited": 1}),
        schedule(sid, "*/2 * * * * *"),
    )
    for sid in IDS
}


class TickQueueEntries(RuleBasedStateMachine):
    """The leader's sequences: a batch is taken, the feed and syncs act on
    the queue while it is in flight, and its answers come back.  The model
    is the last tick the queue was told of for each schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.queue = TickQueue({}, prefix="p")
        self.last: dict[str, int] = {}  # the model: known last ticks
        self.batch: list[Planned] | None = None

    def _forget(self, sid: str) -> None:
        self.last.pop(sid, None)

    @rule(
        sid=st.sampled_from(IDS),
        variant=st.integers(0, 2),
        offset=st.sampled_from([None, 0, 400, 1000, 2000, -3000]),
    )
    def put(self, sid: str, variant: int, offset: int | None) -> None:
        s = VARIANTS[sid][variant]
        known = self.queue.last(sid)
        if offset is None:
            self.queue.put(s)
            self._forget(sid)
            return
        last = (known if known is not None else self.now - 2000) + offset
        self.queue.put(s, last=last)
        self.last[sid] = last

    @rule(sid=st.sampled_from(IDS))
    def discard(self, sid: str) -> None:
        self.queue.discard(sid)
        self._forget(sid)

    @rule(
        which=st.lists(st.sampled_from(IDS), unique=True),
        behind=st.sampled_from([0, 1000, 5000, 400_000]),
        replace=st.booleans(),
    )
    def load(self, which: list[str], behind: int, replace: bool) -> None:
        if replace:
            self.queue.replace_all({sid: VARIANTS[sid][0] for sid in which})
        last = {sid: self.now - behind for sid in which if sid in self.queue.schedules}
        load(self.queue, last)
        self.last = dict(last)

    @precondition(lambda self: self.batch is None)
    @rule(advance=st.sampled_from([0, 400, 1000, 3000]), limit=st.sampled_from([1, 2, 5, 1000]))
    def take(self, advance: int, limit: int) -> None:
        self.now += advance
        batch = self.queue.take(self.now, limit)
        runs: dict[str, list[int]] = {}
        order: list[str] = []
        for item in batch:
            sid = item.schedule.id
            if not order or order[-1] != sid:
                assert sid not in runs, f"{sid} planned twice in one batch"
                order.append(sid)
            runs.setdefault(sid, []).append(item.claim.tick_ms)
        for sid, ticks in runs.items():
            assert ticks == sorted(set(ticks)), f"{sid}: ticks {ticks} planned twice"
            assert ticks[0] > self.last[sid], f"{sid}: tick {ticks[0]} at or before its last {self.last[sid]}"
            assert ticks[-1] <= self.now
        self.batch = batch

    @precondition(lambda self: self.batch is not None)
    @rule(data=st.data())
    def decided(self, data: st.DataObject) -> None:
        assert self.batch is not None
        batch, self.batch = self.batch, None
        # Settling after the queue lost a schedule's last tick (a step-down
        # emptied it) is another part's concern: not drawn here.
        if any(p.schedule.id in self.queue.schedules and self.queue.last(p.schedule.id) is None for p in batch):
            return
        results = [
            data.draw(st.sampled_from([ClaimResult.FIRE, ClaimResult.RECORDED, ClaimResult.NOT_YET, ClaimResult.GONE]))
            for _ in batch
        ]
        self.queue.decided(batch, results, self.now)
        for item, result in zip(batch, results, strict=True):
            sid = item.schedule.id
            if self.queue.last(sid) is None:
                self._forget(sid)
            elif result in (ClaimResult.FIRE, ClaimResult.RECORDED) and sid in self.last:
                self.last[sid] = max(self.last[sid], item.claim.tick_ms)

    @invariant()
    def next_due_is_a_known_schedules_next_tick(self) -> None:
        due = self.queue.next_due_ms()
        if due is not None:
            assert any(
                sid in self.queue.schedules and self.queue.schedules[sid].next_after(last) == due
                for sid, last in self.last.items()
            )


TickQueueEntries.TestCase.settings = settings(max_examples=examples(300), stateful_step_count=30, deadline=None)
test_the_tick_queue_holds_one_live_entry_per_schedule = TickQueueEntries.TestCase
