"""A cold start with durable claims (leader/thread.py), in-process on the
memory store and a fake clock: a replica still in its initial sync when the
workers boot is waited for at INFO, not a WARNING pair per process; a
replica that stays silent past a lease still gets its WARNING."""

from __future__ import annotations

import logging

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.thread import LeaderThread
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.durability import Durability
from dramatiq_cron_middleware.store.in_memory import InMemoryStore
from dramatiq_cron_middleware.store.timing import Timing
from tests.support.stores import MemoryHarness

LEASE_MS = 15_000


class Boot:
    """A leader with durable claims (one replica) on a memory store whose
    replica does not acknowledge yet."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.harness = MemoryHarness()
        self.harness.server.replicas_acking = 0
        self.broker = StubBroker()
        dramatiq.actor(lambda: None, actor_name="job", broker=self.broker)
        schedule = bind_schedule(
            "job", "default", Schedule("* * * * * *"), timezone="UTC", catch_up="each", catch_up_window=300_000
        )
        clock = ServerClock(monotonic=self.harness.time.monotonic, wall=self.harness.time.wall)
        store = InMemoryStore(self.harness.server, clock=clock, ttl_ms=LEASE_MS, durability=Durability(replicas=1))
        self.logger = logging.getLogger("test.cold.start")
        caplog.set_level(logging.INFO, logger=self.logger.name)
        self.caplog = caplog
        self.leader: LeaderThread = LeaderThread(
            store=store,
            boundary=BrokerBoundary(self.broker, Boundary.PLAIN, keys=store.keys, mark_ms=LEASE_MS),
            declared=[schedule],
            timing=Timing.for_lease(LEASE_MS),
            logger=self.logger,
            pace=False,
        )

    def turns(self, seconds: float) -> None:
        for _ in range(int(seconds * 4)):
            self.harness.pass_time(250)
            self.leader.step()

    def lines(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.caplog.records if r.levelno == level and r.name == self.logger.name]

    def fired(self) -> int:
        return sum(len(self.broker.queues[q].queue) for q in self.broker.queues)


def test_a_replica_in_its_initial_sync_at_boot_is_waited_for_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 28 item 9: at a cold start with a freshly started replica
    (Redis delays its first sync by repl-diskless-sync-delay, 5 s), each
    process logged a WARNING pair; nothing may fire meanwhile (a claim is
    durable only on the replica), but the wait is said at INFO."""
    boot = Boot(caplog)
    boot.turns(5)
    assert boot.fired() == 0
    boot.harness.server.replicas_acking = 1
    boot.turns(3)
    assert boot.leader.leading and boot.fired() >= 1
    assert not [w for w in boot.lines(logging.WARNING) if "durable" in w], boot.lines(logging.WARNING)
    infos = boot.lines(logging.INFO)
    assert len([i for i in infos if i.startswith("Waiting for the cron scheduler's first writes")]) == 1, infos
    assert len([i for i in infos if "first writes are confirmed durable: it fires" in i]) == 1, infos


def test_a_replica_silent_past_a_lease_at_boot_gets_its_warning(caplog: pytest.LogCaptureFixture) -> None:
    boot = Boot(caplog)
    boot.turns(LEASE_MS / 1000 + 3)
    assert boot.fired() == 0
    warnings = boot.lines(logging.WARNING)
    assert len([w for w in warnings if "not confirmed durable" in w]) == 1, warnings
    boot.harness.server.replicas_acking = 1
    boot.turns(LEASE_MS / 1000 + 3)
    assert boot.leader.leading and boot.fired() >= 1
    assert len([w for w in boot.lines(logging.WARNING) if "confirmed durable again" in w]) == 1
