"""The leader's parts (tick queue, sync, claim, settle) on the memory store
and a fake clock: in-process, no thread, no Redis."""

from __future__ import annotations

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.tick_queue import TickQueue
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.store.codes import ClaimResult
from dramatiq_cron_middleware.store.durability import Durability
from dramatiq_cron_middleware.store.lease import Acquired
from dramatiq_cron_middleware.store.ledger import SyncEntry
from tests.support.stores import MemoryHarness


def test_each_minute_fires_once_across_a_lost_reply_on_a_fake_clock() -> None:
    """Given a leader's tick queue synced from the memory store, when five
    minutes pass on the fake clock and the third claim's reply is lost,
    then settling it applies its results and every minute fires once."""
    harness = MemoryHarness()
    schedule = bind_schedule(
        "job", "default", Schedule("* * * * *", name="a"), timezone="UTC", catch_up="each", catch_up_window=300_000
    )
    store = harness.candidate("a", ttl_ms=120_000)
    acquired = store.lease.acquire()
    assert isinstance(acquired, Acquired) and store.lease.token is not None
    token, epoch = store.lease.token, acquired.epoch
    queue = TickQueue({schedule.id: schedule}, prefix="contract")
    queue.begin_load()
    store.ledger.sync(token, epoch, [SyncEntry.of(schedule)], on_chunk=queue.load_part)
    queue.end_load()
    fired: list[int] = []
    for minute in range(5):
        harness.pass_time(60_000)
        assert store.lease.renew()
        batch = queue.take(store.clock.now_ms(), 1000)
        assert len(batch) == 1
        claims = [p.claim for p in batch]
        if minute == 2:
            harness.server.lose_reply("claim")
            try:
                store.ledger.claim(token, epoch, f"b{minute}", claims)
            except TimeoutError:
                pass
            results = store.ledger.settle(f"b{minute}", epoch=epoch, claims=claims).results
            assert results is not None
        else:
            results = store.ledger.claim(token, epoch, f"b{minute}", claims).results
        queue.decided(batch, results, store.clock.now_ms())
        fired += [p.claim.tick_ms for p, r in zip(batch, results, strict=True) if r == ClaimResult.FIRE]
    assert len(fired) == 5 and len(set(fired)) == 5
    assert all(tick % 60_000 == 0 and tick <= harness.now_ms() for tick in fired)
    assert [h.tick_ms for h in harness.server.history] == fired


def test_a_runtime_add_whose_fenced_sync_fails_is_read_again_at_the_next_turn() -> None:
    """Given a leading feed in sync, when a runtime schedule is added and
    the fenced sync that brings it into the tick queue is refused, then the
    change is read again at the next turn and the schedule joins the queue
    (the feed used to move its version first: the schedule stayed out of
    the queue, unfired, until the next takeover; the model test found it)."""
    import logging

    import pytest

    from dramatiq_cron_middleware.leader.declared import Declared
    from dramatiq_cron_middleware.leader.reports import OnceReports
    from dramatiq_cron_middleware.leader.runtime_feed import RuntimeFeed

    harness = MemoryHarness()
    store = harness.candidate("a", ttl_ms=120_000)
    acquired = store.lease.acquire()
    assert isinstance(acquired, Acquired) and store.lease.token is not None and store.runtime is not None
    token, epoch = store.lease.token, acquired.epoch
    queue = TickQueue({}, prefix="contract")
    feed = RuntimeFeed(
        store.runtime,
        keys=store.keys,
        queue=queue,
        ledger=store.ledger,
        declared=Declared({}),
        clock=store.clock,
        report_once=OnceReports(logging.getLogger("test.feed")),
    )
    feed.reload()
    queue.begin_load()
    store.ledger.sync(token, epoch, [], on_chunk=queue.load_part)
    queue.end_load()
    added = harness.add_runtime("job", "* * * * *", name="r")
    feed.pending = True  # as the notification of the write does
    harness.server.refuse("sync")
    with pytest.raises(OSError):
        feed.follow(token, epoch)
    assert added.id not in queue.schedules
    feed.follow(token, epoch)
    assert added.id in queue.schedules and queue.last(added.id) is not None


def test_a_leader_whose_writes_no_replica_acknowledges_enqueues_nothing_and_steps_down_in_its_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Given a leader on the memory store that requires one replica, when
    replicas stop acknowledging: its claims are not enqueued, it steps down
    once its firing deadline passes (one WARNING for the replicas, one for
    the step-down); when they acknowledge again, the claim made meanwhile
    is settled and every tick is enqueued exactly once."""
    import logging
    from collections import Counter

    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    from dramatiq_cron_middleware.leader.thread import LeaderThread
    from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
    from dramatiq_cron_middleware.store.clock import ServerClock
    from dramatiq_cron_middleware.store.in_memory import InMemoryStore
    from dramatiq_cron_middleware.store.timing import Timing

    harness = MemoryHarness()
    harness.server.replicas_acking = 1
    lease_ms = 6_000
    timing = Timing.for_lease(lease_ms)
    broker = StubBroker()
    dramatiq.actor(lambda: None, actor_name="job", broker=broker)
    schedule = bind_schedule(
        "job", "default", Schedule("* * * * * *"), timezone="UTC", catch_up="each", catch_up_window=300_000
    )
    clock = ServerClock(monotonic=harness.time.monotonic, wall=harness.time.wall)
    store = InMemoryStore(harness.server, clock=clock, ttl_ms=lease_ms, durability=Durability(replicas=1))
    logger = logging.getLogger("test.durable.memory")
    caplog.set_level(logging.INFO, logger=logger.name)
    leader: LeaderThread = LeaderThread(
        store=store,
        boundary=BrokerBoundary(broker, Boundary.PLAIN, keys=store.keys, mark_ms=lease_ms),
        declared=[schedule],
        timing=timing,
        logger=logger,
        pace=False,
    )

    def turns(seconds: int) -> None:
        for _ in range(seconds * 4):
            harness.pass_time(250)
            leader.step()

    turns(3)
    assert leader.leading and len(_messages(broker)) >= 2
    harness.server.replicas_acking = 0
    cut = len(_messages(broker))
    turns(int(timing.fire_deadline) + 2)
    assert not leader.leading
    assert len(_messages(broker)) <= cut + 1  # a tick claimed and confirmed at the cut
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "not confirmed durable" in w]) == 1, warnings
    assert len([w for w in warnings if "Lost cron leadership" in w]) == 1, warnings

    harness.server.replicas_acking = 1
    turns(int(timing.lease_ms / 1000) + 4)
    assert leader.leading
    ids = _messages(broker)
    assert not [i for i, n in Counter(ids).items() if n > 1]
    fired = sorted(h.tick_ms for h in harness.server.history if h.outcome in ("fired", "caught_up"))
    assert len(ids) == len(fired) and fired == list(range(fired[0], fired[-1] + 1, 1000))


def _messages(broker: object) -> list[str]:
    """Message ids of everything enqueued on a StubBroker, in order."""
    from dramatiq import Message

    queue = broker.queues["default"]  # type: ignore[attr-defined]
    return [Message.decode(item).message_id for item in list(queue.queue)]
