"""The tick queue plans bounded batches: on-time ticks first, the backlog
oldest first, and every batch moves every schedule it touches forward.
In-process: no Redis, the ledger's answers are given by hand."""

from __future__ import annotations

import logging
import time

import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware.leader.owed import Owed, OwedQueue
from dramatiq_cron_middleware.leader.tick_queue import TickQueue
from dramatiq_cron_middleware.schedules.cadence import Cadence
from dramatiq_cron_middleware.schedules.planner import ON_TIME_MS, message_for, plan
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, Schedule, schedules_for_actor
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.codes import ClaimResult, Outcome
from dramatiq_cron_middleware.store.keys import Keys
from tests.support.ticks import load

NOW = 1_800_000_000_000  # a whole minute


def every_second(actor: str, **options: object) -> BoundSchedule:
    return schedules_for_actor(
        actor, "default", Schedule("* * * * * *", **options), timezone="UTC", catch_up="each", catch_up_window=300_000
    )[0]


def grant_all(queue: TickQueue, now: int, limit: int) -> list[tuple[str, int, str]]:
    """Take one batch and answer it the way a ledger in sync would."""
    batch = queue.take(now, limit)
    results = [ClaimResult.FIRE if p.claim.fire else ClaimResult.RECORDED for p in batch]
    queue.decided(batch, results, now)
    return [(p.schedule.id, p.claim.tick_ms, str(p.claim.outcome)) for p in batch]


@pytest.mark.slow
def test_a_five_minute_backlog_is_worked_off_in_bounded_batches_that_each_make_progress() -> None:
    """Given 300 per-second schedules last decided five minutes ago (the
    state after an outage), when the queue plans batches of at most 1,000
    claims, then every batch is bounded, every batch moves the oldest ticks
    forward, and the whole backlog is decided once each, in at most
    ceil(90,000 / 1,000) + 1 batches."""
    schedules = {s.id: s for s in (every_second(f"job{i}") for i in range(300))}
    queue = TickQueue(schedules, prefix="p")
    load(queue, {sid: NOW - 300_000 for sid in schedules})
    decided: set[tuple[str, int]] = set()
    batches = 0
    oldest = NOW - 300_000
    while True:
        batch = grant_all(queue, NOW, 1000)
        if not batch:
            break
        batches += 1
        assert len(batch) <= 1000
        ticks = [tick for _, tick, _ in batch]
        assert min(ticks) >= oldest, "a batch went back to older ticks"
        oldest = min(ticks)
        for sid, tick, _ in batch:
            assert (sid, tick) not in decided, f"{sid} {tick} decided twice"
            decided.add((sid, tick))
        assert batches <= 91
    assert len(decided) == 300 * 300
    assert all(queue.last(sid) == NOW for sid in schedules)


def test_a_backlog_shared_by_many_schedules_walks_each_tick_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given 200 schedules of one expression and zone, a minute behind (the
    state after an outage), when the queue works the backlog off, then each
    backlog tick costs one walk of the expression in all, not one per
    schedule: the schedules ask for the same ticks one after another."""
    walks: list[int] = []
    walk = Cadence._next_after

    def counted(cadence: Cadence, instant_ms: int) -> int:
        walks.append(instant_ms)
        return walk(cadence, instant_ms)

    monkeypatch.setattr(Cadence, "_next_after", counted)
    schedules = {
        s.id: s
        for s in (
            schedules_for_actor(
                f"job{i}", "default", "*/2 * * * * *", timezone="Asia/Tokyo", catch_up="each", catch_up_window=300_000
            )[0]
            for i in range(200)
        )
    }
    queue = TickQueue(schedules, prefix="p")
    load(queue, {sid: NOW - 60_000 for sid in schedules})
    while grant_all(queue, NOW, 1000):
        pass
    assert all(queue.last(sid) == NOW for sid in schedules)
    assert sorted(walks) == sorted(set(walks)), "an instant was walked twice"
    assert len(walks) <= 31, f"{len(walks)} walks for 31 ticks of one expression"


def test_on_time_ticks_go_before_a_backlog() -> None:
    """Given one schedule with a five-minute backlog and fifty on time, when
    a batch smaller than the backlog is planned, then all fifty on-time
    ticks are in it."""
    late = every_second("late")
    punctual = [every_second(f"now{i}") for i in range(50)]
    queue = TickQueue({s.id: s for s in [late, *punctual]}, prefix="p")
    load(queue, {late.id: NOW - 300_000, **{s.id: NOW - 1000 for s in punctual}})
    batch = queue.take(NOW, 60)
    on_time = {p.schedule.id for p in batch if p.claim.tick_ms == NOW}
    assert on_time >= {s.id for s in punctual}
    assert all(p.claim.outcome == Outcome.FIRED for p in batch if p.schedule.id != late.id)


def test_an_on_time_tick_uses_the_message_built_ahead() -> None:
    s = every_second("job")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW - 1000})
    grant_all(queue, NOW, 10)  # fires NOW
    queue.build_ahead(NOW)  # what the leader does before it sleeps
    batch = queue.take(NOW + 1000, 10)
    assert [p.claim.tick_ms for p in batch] == [NOW + 1000]
    assert batch[0].message is not None
    assert batch[0].message.message_id == message_for(s, NOW + 1000, prefix="p").message_id
    assert batch[0].message.message_timestamp == NOW + 1000  # stamped with its tick (AgeLimit counts from it)


def test_messages_not_built_ahead_are_stamped_by_the_schedulers_clock_not_the_hosts() -> None:
    """Given a queue whose clock (Redis time) reads a minute later than
    this host's wall clock, when the first tick after a sync and a backlog
    of caught-up ticks are planned (no message built ahead), then every
    message is stamped with the queue's clock: dramatiq's AgeLimit on the
    consumers counts from the stamp."""
    s = every_second("job")
    redis_now = int(time.time() * 1000) + 60_000
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: redis_now - 5000})
    batch = queue.take(redis_now, 10)
    assert len(batch) == 5
    assert {p.message.message_timestamp for p in batch if p.message is not None} == {redis_now}


@pytest.mark.parametrize("result", [ClaimResult.REFUSED, ClaimResult.LOST], ids=lambda r: r.name.lower())
def test_an_answer_that_proves_the_picture_stale_takes_the_queue_out_of_sync(result: ClaimResult) -> None:
    s = every_second("job")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW - 1000})
    batch = queue.take(NOW, 10)
    queue.decided(batch, [result], NOW)
    assert not queue.in_sync


def test_a_claim_in_flight_is_out_of_sync_until_its_reply_is_decided() -> None:
    """Given a batch whose claim was sent, the queue is out of sync (the
    ledger may have moved without it) until that reply is decided; a batch
    whose fate stayed unknown (invalidated, then settled) leaves it out of
    sync until a sync."""
    s = every_second("job")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW - 1000})
    batch = queue.take(NOW, 10)
    queue.sent(batch)
    assert not queue.in_sync
    queue.decided(batch, [ClaimResult.FIRE], NOW)
    assert queue.in_sync and queue.last(s.id) == NOW

    lost = queue.take(NOW + 1000, 10)
    queue.sent(lost)
    queue.invalidate()  # the reply was lost
    queue.decided(lost, [ClaimResult.FIRE], NOW + 1000)  # settled later
    assert not queue.in_sync


def test_answers_for_a_queue_that_forgot_its_ticks_are_taken_without_error() -> None:
    """Given a batch in flight when the queue let go of every tick (a
    step-down while the claim's reply was lost: the runtime schedules are
    dropped and the declared ones kept without ticks), when the batch is
    settled, then its answers are taken without error, nothing is put back
    on a tick the queue no longer knows, and the queue stays out of sync
    until a sync reads the ledger."""
    s = every_second("job")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW - 1000})
    batch = queue.take(NOW, 10)
    queue.replace_all({s.id: s})  # what a step-down does
    queue.decided(batch, [ClaimResult.FIRE], NOW)
    assert not queue.in_sync
    assert queue.last(s.id) is None
    assert queue.next_due_ms() is None


def test_a_tick_of_a_removed_runtime_definition_drops_the_schedule() -> None:
    """GONE: the definition was removed or replaced since the claim was
    planned; this copy is forgotten (the change feed brings a new one)."""
    s = every_second("job")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW - 1000})
    batch = queue.take(NOW, 10)
    queue.decided(batch, [ClaimResult.GONE], NOW)
    assert s.id not in queue.schedules and queue.take(NOW + 5000, 10) == []


def test_a_tick_asked_too_early_stays_due() -> None:
    """NOT_YET (the server's clock is behind ours) decides nothing: the tick
    is asked for again, once the server has reached it."""
    s = every_second("job")
    queue = TickQueue({s.id: s}, prefix="p")
    load(queue, {s.id: NOW - 1000})
    batch = queue.take(NOW, 10)
    queue.decided(batch, [ClaimResult.NOT_YET], NOW)
    assert queue.in_sync and queue.last(s.id) == NOW - 1000
    assert queue.next_due_ms() == NOW


def test_a_removed_schedule_is_never_planned_again() -> None:
    a, b = every_second("a"), every_second("b")
    queue = TickQueue({a.id: a, b.id: b}, prefix="p")
    load(queue, {a.id: NOW - 1000, b.id: NOW - 1000})
    queue.discard(a.id)
    assert {p.schedule.id for p in queue.take(NOW, 10)} == {b.id}


@pytest.mark.parametrize("policy", ["each", "latest", "none"])
def test_planning_in_chunks_decides_what_planning_at_once_decides(policy: str) -> None:
    """The bounded plan (the leader) and the unbounded one (the simulator)
    fire the same ticks and record the same last tick."""
    s = schedules_for_actor(
        "job", "default", Schedule("*/7 * * * * *"), timezone="UTC", catch_up=policy, catch_up_window=120_000
    )[0]
    last = NOW - 600_000
    at_once = plan(s, last, NOW)
    chunked = []
    cursor = last
    while True:
        step = plan(s, cursor, NOW, limit=5)
        if not step:
            break
        chunked.extend(step)
        cursor = step[-1].tick_ms
    fired = lambda ds: [d.tick_ms for d in ds if d.fire]  # noqa: E731
    assert fired(chunked) == fired(at_once)
    assert chunked[-1].tick_ms == at_once[-1].tick_ms


def test_the_on_time_fast_path_decides_what_the_general_path_decides() -> None:
    s = every_second("job")
    for lag in (0, 1, ON_TIME_MS - 1):
        fast = plan(s, NOW - 1000, NOW + lag, head=NOW)
        general = plan(s, NOW - 1000, NOW + lag)
        assert fast == general


class VetoingBroker(StubBroker):
    """Refuses every message of one actor, as a vetoing middleware would."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def enqueue(self, message, *, delay=None):  # type: ignore[no-untyped-def]
        if message.actor_name == self.refused:
            raise RuntimeError("vetoed")
        return super().enqueue(message, delay=delay)


def test_one_failing_schedule_warns_once_and_never_flaps_with_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """Given one actor whose enqueue always fails and others that succeed,
    when thirty rounds of ticks are enqueued and retried, then exactly one
    WARNING names the failing schedule and none says 'works again'; when
    it recovers, one WARNING says so."""
    broker = VetoingBroker("bad")
    mono = [0.0]
    now = [NOW]
    owed = OwedQueue(
        boundary=BrokerBoundary(broker, Boundary.PLAIN, keys=Keys("p"), mark_ms=60_000),
        logger=logging.getLogger("test.owed"),
        now_ms=lambda: now[0],
        monotonic=lambda: mono[0],
    )
    bad, good = every_second("bad"), every_second("good")
    broker.declare_queue("default")
    with caplog.at_level(logging.WARNING, logger="test.owed"):
        for round_ in range(30):
            tick = NOW + round_ * 1000
            now[0] = tick
            mono[0] += 1.0
            owed.send([Owed(s, tick, message_for(s, tick, prefix="p")) for s in (bad, good)])
            mono[0] += 10.0
            owed.pay()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len([w for w in warnings if "fails" in w]) == 1, warnings
        assert not [w for w in warnings if "works again" in w], warnings
        broker.refused = "nobody"
        mono[0] += 10.0
        owed.pay()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len([w for w in warnings if "works again" in w]) == 1, warnings


class ClockReadingBoundary(BrokerBoundary):
    """Records the clock each send is given (a jittered message's eta is
    counted from it), and enqueues nothing."""

    def __init__(self) -> None:
        super().__init__(StubBroker(), Boundary.PLAIN, keys=Keys("p"), mark_ms=60_000)
        self.clocks: list[int] = []

    def send(self, items, *, now_ms):  # type: ignore[no-untyped-def]
        self.clocks.append(now_ms)
        return [None] * len(items)


def test_the_eta_of_an_owed_enqueue_counts_from_the_schedulers_clock() -> None:
    """Given an owed queue on a clock a minute ahead of this host's wall
    clock, when it sends a jittered tick, then the send is timed by that
    clock (the consumers compare the eta with their own clocks)."""
    boundary = ClockReadingBoundary()
    redis_now = int(time.time() * 1000) + 60_000
    owed = OwedQueue(boundary=boundary, logger=logging.getLogger("test.owed"), now_ms=lambda: redis_now)
    s = every_second("job", jitter=500)
    owed.send([Owed(s, redis_now, message_for(s, redis_now, prefix="p"))])
    assert boundary.clocks == [redis_now]
