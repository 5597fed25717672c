"""A model-based test of the leader: two candidates (the real LeaderThread
code, turned by hand, never started) on one MemoryServer and a fake
clock, under random interleavings of time passing, turns, runtime adds,
replacements (same and other shape), removals and re-adds, lost and
refused replies, step-downs and takeovers, clock steps and failing
enqueues.  The checker holds every enqueue to the guarantees: at most
once per (schedule, tick), never early, nothing after remove() returned,
and nothing lost once faults clear (every outage here is shorter than
the catch-up window, whose policy is "each").
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.thread import LeaderThread
from dramatiq_cron_middleware.schedules.outcome import Outcome
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, bind_schedule
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.in_memory import InMemoryStore
from dramatiq_cron_middleware.store.lease import Candidate
from dramatiq_cron_middleware.store.timing import Timing
from dramatiq_cron_middleware.testing import _Errors
from tests.support.examples import examples
from tests.support.faults import FaultyServer

LEASE_MS = 2000
WINDOW_MS = 3_600_000
ACTOR = "model_job"
START_MS = 1_700_000_000_000
OPERATIONS = ("claim", "sync", "settle", "renew", "acquire", "load_all", "changes_since", "version")


def _bind(name: str, every: int, *, source: str = "code") -> BoundSchedule:
    return bind_schedule(
        ACTOR,
        "default",
        Schedule(every=every, name=name),
        timezone="UTC",
        catch_up="each",
        catch_up_window=WINDOW_MS,
        source=source,  # type: ignore[arg-type]
    )


class _RecordingBroker(StubBroker):
    """A broker boundary whose enqueue records (schedule, tick, store time)
    and raises while ``failing``."""

    def __init__(self, now_ms: Any) -> None:
        super().__init__()
        self.now_ms = now_ms
        self.failing = False
        self.record: list[tuple[str, int, int]] = []

    def enqueue(self, message: Any, *, delay: Any = None) -> Any:
        if self.failing:
            raise ConnectionError("broker down (injected)")
        tick = int(datetime.fromisoformat(message.options["cron_tick"]).timestamp() * 1000)
        self.record.append((message.options["cron_schedule"], tick, self.now_ms()))
        return super().enqueue(message, delay=delay)


class LeaderModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ms = START_MS
        self.server = FaultyServer(now_ms=lambda: self.ms)
        self.late = 0
        self._server_call = self.server.call
        self.server.call = self._call  # type: ignore[method-assign]
        self.broker = _RecordingBroker(lambda: self.ms)
        dramatiq.actor(lambda: None, actor_name=ACTOR, broker=self.broker)
        self.declared = _bind("declared", 1000)
        self.offsets = [0, 0]
        self.errors = _Errors()
        self.logger = logging.Logger("model")  # not registered: no handler but ours
        self.logger.addHandler(self.errors)
        self.leaders = [self._candidate(i) for i in range(2)]
        # schedule id -> (start of the current definition, its shape), for live ones
        self.live: dict[str, tuple[int, str]] = {self.declared.id: (self.ms, self.declared.shape)}
        # schedule id -> store time of its removal (while removed)
        self.removed: dict[str, int] = {}
        # schedule id -> store times of the writes it starts anew from (an
        # add after a removal, a replacement with other ticks)
        self.rebased: dict[str, list[int]] = {}
        for leader in self.leaders:
            self._turn(leader)

    def _candidate(self, index: int) -> LeaderThread[Any]:
        clock = ServerClock(
            monotonic=lambda: self.ms / 1000 - 1_000_000,
            wall=lambda: (self.ms + self.offsets[index]) / 1000,
        )
        store = InMemoryStore(self.server, clock=clock, ttl_ms=LEASE_MS, candidate=Candidate(host=f"c{index}", pid=0))
        leader: LeaderThread[Any] = LeaderThread(
            store=store,
            boundary=BrokerBoundary(self.broker, Boundary.PLAIN, keys=store.keys, mark_ms=LEASE_MS),
            declared=[self.declared],
            timing=Timing.for_lease(LEASE_MS),
            logger=self.logger,
            pace=False,  # the model moves time: a turn never waits
        )
        return leader

    def _turn(self, leader: LeaderThread[Any]) -> None:
        leader.step()

    # -- rules ------------------------------------------------------------------

    @rule(ms=st.integers(1, 1500))
    def time_passes(self, ms: int) -> None:
        self.ms += ms

    @rule(ms=st.integers(1, 3000))
    def run(self, ms: int) -> None:
        """Time passes with both candidates turning every 100 ms."""
        end = self.ms + ms
        while self.ms < end:
            self.ms = min(self.ms + 100, end)
            for leader in self.leaders:
                self._turn(leader)

    @rule(which=st.integers(0, 1))
    def turn(self, which: int) -> None:
        self._turn(self.leaders[which])

    @rule(name=st.sampled_from(["a", "b"]), every=st.sampled_from([1000, 2000]))
    def add(self, name: str, every: int) -> None:
        schedule = _bind(name, every, source="runtime")
        sid = schedule.id
        known = self.live.get(sid)
        self.server.add_runtime([schedule])
        self.removed.pop(sid, None)
        if known is None or known[1] != schedule.shape:
            self.live[sid] = (self.ms, schedule.shape)
            self.rebased.setdefault(sid, []).append(self.ms)

    @rule(name=st.sampled_from(["a", "b"]), gap=st.integers(100, 3000))
    def reshape_there_and_back(self, name: str, gap: int) -> None:
        """An operator's edit and its undo: other ticks, then the first ones
        again, ``gap`` ms apart with both candidates turning (each write
        starts the schedule anew; the second must not take the first's
        shape for unchanged)."""
        self.add(name, 1000)
        self.run(gap)
        self.add(name, 2000)
        self.run(gap)
        self.add(name, 1000)

    @rule(name=st.sampled_from(["a", "b"]))
    def remove(self, name: str) -> None:
        sid = f"{ACTOR}:{name}"
        if self.server.remove_runtime(sid):
            self.live.pop(sid, None)
            self.removed[sid] = self.ms

    @rule(operation=st.sampled_from(OPERATIONS), lose=st.booleans())
    def fault(self, operation: str, lose: bool) -> None:
        """The next call of ``operation`` (by whoever makes it) is refused
        or its reply lost."""
        (self.server.lose_reply if lose else self.server.refuse)(operation)

    @rule(
        which=st.integers(0, 1),
        operation=st.sampled_from(OPERATIONS),
        lose=st.booleans(),
        before=st.integers(0, 1500),
        late=st.sampled_from([0, 500, 2000]),
    )
    def faulty_turn(self, which: int, operation: str, lose: bool, before: int, late: int) -> None:
        """``before`` ms pass, then one turn of a candidate whose call of
        ``operation`` is refused or runs and has its reply lost ``late`` ms
        later (the fault is gone afterwards if the turn did not make that
        call)."""
        self.ms += before
        self.fault(operation, lose)
        self.late = late
        try:
            self._turn(self.leaders[which])
        finally:
            self.late = 0
            self.server.lost.pop(operation, None)
            self.server.refused.pop(operation, None)

    def _call(self, operation: str, run: Any) -> object:
        """The server's calls, a lost reply arriving ``self.late`` ms late."""
        try:
            return self._server_call(operation, run)
        except TimeoutError:
            self.ms += self.late
            raise

    @rule()
    def lease_lost(self) -> None:
        self.server.delete_lease()

    @rule(which=st.integers(0, 1))
    def step_down(self, which: int) -> None:
        leader = self.leaders[which]
        if leader.leadership is not None:
            leader._step_down("the model")

    @rule(which=st.integers(0, 1), ms=st.sampled_from([-5000, -500, 500, 5000]))
    def clock_step(self, which: int, ms: int) -> None:
        self.offsets[which] += ms

    @rule(failing=st.booleans())
    def broker_fails(self, failing: bool) -> None:
        self.broker.failing = failing

    @rule()
    def quiesce(self) -> None:
        """Faults clear, time runs on with both candidates turning: every
        tick of a live definition up to a lease ago must be out."""
        self.server.lost.clear()
        self.server.refused.clear()
        self.broker.failing = False
        self.offsets = [0, 0]
        for _ in range(4 * LEASE_MS // 250):
            self.ms += 250
            for leader in self.leaders:
                self._turn(leader)
        sent = {(sid, tick) for sid, tick, _ in self.broker.record}
        # A granted tick whose enqueue failed is dropped when its definition
        # is replaced or removed before a retry (recorded in the history).
        sent |= {(h.schedule_id, h.tick_ms) for h in self.server.history if h.outcome == Outcome.DROPPED.value}
        horizon = self.ms - LEASE_MS
        for sid, (start, _) in self.live.items():
            every = 1000 if sid == self.declared.id else self._every(sid)
            tick = (start // every + 1) * every
            while tick <= horizon:
                assert (sid, tick) in sent, f"{sid} tick {tick} (start {start}) lost"
                tick += every

    def _every(self, sid: str) -> int:
        every = self.server.runtime[sid].every
        assert every is not None
        return every

    # -- invariants ------------------------------------------------------------

    @invariant()
    def no_bug(self) -> None:
        assert not self.errors.lines, f"the leader loop failed: {self.errors.lines}"

    @invariant()
    def at_most_once(self) -> None:
        counts = Counter((sid, tick) for sid, tick, _ in self.broker.record)
        twice = [key for key, n in counts.items() if n > 1]
        assert not twice, f"enqueued twice: {twice}"

    @invariant()
    def never_early(self) -> None:
        early = [(sid, tick, at) for sid, tick, at in self.broker.record if tick > at]
        assert not early, f"enqueued before its tick: {early}"

    @invariant()
    def nothing_after_remove(self) -> None:
        late = [
            (sid, tick, at) for sid, tick, at in self.broker.record if sid in self.removed and at > self.removed[sid]
        ]
        assert not late, f"enqueued after remove(): {late}"

    @invariant()
    def starts_from_its_write(self) -> None:
        """A definition written anew (other ticks, or added again) starts
        from the write: no tick up to it is granted after it."""
        early = [
            (h.schedule_id, h.tick_ms, h.at_ms)
            for h in self.server.history
            if h.outcome == Outcome.FIRED.value
            and any(h.tick_ms <= w < h.at_ms for w in self.rebased.get(h.schedule_id, ()))
        ]
        assert not early, f"a tick before its definition's write was granted after it: {early}"

    def teardown(self) -> None:
        for leader in self.leaders:
            leader.stopping.close()


LeaderModel.TestCase.settings = settings(max_examples=examples(300), stateful_step_count=40, deadline=None)
test_leader_model = pytest.mark.slow(LeaderModel.TestCase)
