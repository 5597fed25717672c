"""A backlog never costs the leader its lease, however slowly each tick
goes: in-process, on the memory store and a fake clock that every enqueue
moves on (a loaded machine, where each tick's work takes time).

The leader renews only between batches.  It used to take up to 1,000
claims a batch whatever they cost, so on a machine where a tick took a few
milliseconds one batch outlasted the 2 s lease: the renewal after it found
the lease gone, and the next term did the same (tests/test_catch_up_backlog.py
lost its lease that way on a loaded machine, epoch 8 where 6 was expected).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.firing import BATCH_LIMIT, LeaderObserver
from dramatiq_cron_middleware.leader.thread import LeaderThread
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, bind_schedule
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryServer
from dramatiq_cron_middleware.store.lease import Candidate
from dramatiq_cron_middleware.store.timing import Timing
from tests.support.stores import FakeTime

LEASE_MS = 2000
ACTOR = "backlog_job"


class _SlowBroker(StubBroker):
    """Each enqueue takes ``cost_ms`` of the fake clock, and is recorded as
    (schedule, tick)."""

    def __init__(self, time: FakeTime, cost_ms: int) -> None:
        super().__init__()
        self.time = time
        self.cost_ms = cost_ms
        self.record: list[tuple[str, int]] = []

    def enqueue(self, message: Any, *, delay: Any = None) -> Any:
        self.time.ms += self.cost_ms
        tick = int(datetime.fromisoformat(message.options["cron_tick"]).timestamp() * 1000)
        self.record.append((message.options["cron_schedule"], tick))
        return super().enqueue(message, delay=delay)


class _Renewals(LeaderObserver):
    """When (fake ms) the lease was won and each renewal went out."""

    def __init__(self, time: FakeTime) -> None:
        self.time = time
        self.at: list[int] = []
        self.terms: list[int] = []

    def leadership_changed(self, *, epoch: int, leading: bool) -> None:
        if leading:
            self.terms.append(epoch)
            self.at.append(self.time.ms)

    def renewed(self, *, latency_ms: float) -> None:
        self.at.append(self.time.ms)


@pytest.mark.parametrize(
    ("schedules", "backlog_s", "cost_ms"),
    [
        (40, 120, 3),  # 1,000 claims a batch took 3 s
        (4, 300, 40),  # 128 claims a batch (32 a schedule) took 5 s
        (1, 600, 700),  # one tick outlasts the renewal interval
        (40, 120, 0),  # no cost at all: full batches
    ],
)
def test_a_backlog_is_caught_up_under_one_lease_however_long_each_tick_takes(
    schedules: int, backlog_s: int, cost_ms: int
) -> None:
    """Given per-second schedules whose last decided tick is ``backlog_s``
    old, and a broker on which each enqueue takes ``cost_ms``, when a
    leader catches up, then it renews well within its firing deadline the
    whole time (one term, no step-down), no batch holds more than
    ``BATCH_LIMIT`` claims, and every tick is enqueued exactly once."""
    time = FakeTime()
    server = MemoryServer(now_ms=time.now_ms)
    broker = _SlowBroker(time, cost_ms)
    dramatiq.actor(lambda: None, actor_name=ACTOR, broker=broker)
    start = time.ms // 1000 * 1000
    declared, renewals, warnings, leader = _backlogged(time, server, broker, schedules, backlog_ms=backlog_s * 1000)
    # When: the leader turns until the backlog is out and one more minute has passed.
    _catch_up(time, broker, leader, enqueues=schedules * backlog_s, then_ms=60_000)
    # Then: one term, renewed in time throughout.
    _one_term_renewed_in_time(renewals, warnings)
    # Bounded batches.
    sizes = [len(record.split(",")) for record, _ in server.batches.values()]
    assert max(sizes) <= BATCH_LIMIT
    # Every tick exactly once, up to the last second before the end.
    counts = Counter(broker.record)
    assert [key for key, n in counts.items() if n > 1] == []
    last = (time.ms - 2000) // 1000 * 1000
    for schedule in declared:
        ticks = {tick for sid, tick in counts if sid == schedule.id}
        missing = set(range(start - backlog_s * 1000 + 1000, last, 1000)) - ticks
        assert not missing, f"{schedule.id}: {len(missing)} ticks never enqueued"


class _Lines(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class _StallingBroker(StubBroker):
    """Every tenth enqueue moves the fake clock on by a millisecond (1,000
    claims a batch take 0.1 s), and every ``every``-th one by ``stall_ms``
    more (a collection, or the process not scheduled, in mid-batch).
    Records each enqueue as (schedule, tick)."""

    def __init__(self, time: FakeTime, *, stall_ms: int, every: int) -> None:
        super().__init__()
        self.time = time
        self.stall_ms = stall_ms
        self.every = every
        self.record: list[tuple[str, int]] = []

    def enqueue(self, message: Any, *, delay: Any = None) -> Any:
        n = len(self.record) + 1
        self.time.ms += (n % 10 == 0) + (self.stall_ms if n % self.every == 0 else 0)
        tick = int(datetime.fromisoformat(message.options["cron_tick"]).timestamp() * 1000)
        self.record.append((message.options["cron_schedule"], tick))
        return super().enqueue(message, delay=delay)


@pytest.mark.parametrize("every", [4507, 5503, 6301, 6907])
def test_a_renewal_never_waits_behind_a_batch_that_a_stall_stretches(every: int) -> None:
    """Given a five-minute backlog of 100 per-second schedules and a broker
    on which a batch of 1,000 claims takes 0.1 s but now and then one
    enqueue stalls for 800 ms (a collection, or a loaded machine, in
    mid-batch: the batch takes nine times its estimate), when the leader
    catches up, then every renewal goes out before the batch it would fall
    due in, so from one renewal to the next lies at most one batch and its
    stall: one term, each renewal within the firing deadline of the one
    before.  (When a renewal due during a batch followed it, a stall in a
    batch started just before the renewal fell due pushed the renewal past
    the firing deadline.)"""
    schedules = 100
    time = FakeTime()
    server = MemoryServer(now_ms=time.now_ms)
    broker = _StallingBroker(time, stall_ms=800, every=every)
    dramatiq.actor(lambda: None, actor_name=ACTOR, broker=broker)
    _, renewals, warnings, leader = _backlogged(time, server, broker, schedules, backlog_ms=300_000)
    _catch_up(time, broker, leader, enqueues=schedules * 300, then_ms=10_000)
    _one_term_renewed_in_time(renewals, warnings)
    counts = Counter(broker.record)
    assert [key for key, n in counts.items() if n > 1] == []


def _catch_up(time: FakeTime, broker: Any, leader: LeaderThread[Any], *, enqueues: int, then_ms: int) -> None:
    """Turn ``leader`` every 100 ms of fake time (each turn works off all
    it can) until ``broker`` recorded ``enqueues`` and ``then_ms`` more
    have passed; then close its stop event."""
    try:
        caught_up_at = None
        while caught_up_at is None or time.ms < caught_up_at + then_ms:
            time.ms += 100
            leader.step()
            if caught_up_at is None and len(broker.record) >= enqueues:
                caught_up_at = time.ms
    finally:
        leader.stopping.close()


def _one_term_renewed_in_time(renewals: _Renewals, warnings: list[str]) -> None:
    """One term (epoch 6), no WARNING, and each renewal within the firing
    deadline of the one before."""
    assert renewals.terms == [6], f"terms {renewals.terms}: {warnings}"
    assert not warnings, warnings
    gaps = [b - a for a, b in zip(renewals.at, renewals.at[1:], strict=False)]
    deadline_ms = Timing.for_lease(LEASE_MS).fire_deadline * 1000
    assert max(gaps) < deadline_ms, f"a renewal came {max(gaps)} ms after the one before"


def _backlogged(
    time: FakeTime, server: MemoryServer, broker: StubBroker, schedules: int, *, backlog_ms: int
) -> tuple[list[BoundSchedule], _Renewals, list[str], LeaderThread[Any]]:
    """``schedules`` per-second schedules whose last decided tick is
    ``backlog_ms`` old, and a leader (not started, turned by the test) on
    the memory store, with its renewals and WARNING lines recorded."""
    declared = [
        bind_schedule(
            ACTOR,
            "default",
            Schedule("* * * * * *", name=f"s{i}"),
            timezone="UTC",
            catch_up="each",
            catch_up_window=3_600_000,
        )
        for i in range(schedules)
    ]
    start = time.ms // 1000 * 1000
    server.epoch = 5
    server.ticks = {s.id: f"{start - backlog_ms}:5:1" for s in declared}
    store = InMemoryStore(
        server,
        clock=ServerClock(monotonic=time.monotonic, wall=time.wall),
        ttl_ms=LEASE_MS,
        candidate=Candidate(host="a", pid=0),
    )
    renewals = _Renewals(time)
    logger = logging.Logger("backlog")  # not registered: no handler but ours
    warnings: list[str] = []
    logger.addHandler(_Lines(warnings))
    leader: LeaderThread[Any] = LeaderThread(
        store=store,
        boundary=BrokerBoundary(broker, Boundary.PLAIN, keys=store.keys, mark_ms=LEASE_MS),
        declared=declared,
        timing=Timing.for_lease(LEASE_MS),
        logger=logger,
        observer=renewals,
        pace=False,
    )
    return declared, renewals, warnings, leader
