"""The leader's fault episodes on the memory store and a fake clock: each
state change is reported, even one that falls inside a single turn."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.thread import LeaderThread
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryServer
from dramatiq_cron_middleware.store.lease import Candidate
from dramatiq_cron_middleware.store.timing import Timing
from tests.support.stores import FakeTime

LEASE_MS = 6000
ACTOR = "episode_job"


class _Outage(MemoryServer):
    """While ``down``, every operation is refused (nothing runs); with
    ``down_after_claim``, the first claim that runs takes it down again
    right after (a Redis refusing again within the turn that reached it)."""

    def __init__(self, *, now_ms: Callable[[], int]) -> None:
        super().__init__(now_ms=now_ms)
        self.down = False
        self.down_after_claim = False

    def call(self, operation: str, run: Callable[[], object]) -> object:
        if self.down:
            raise ConnectionRefusedError(f"memory store refused {operation} (injected)")
        result = super().call(operation, run)
        if operation == "claim" and self.down_after_claim:
            self.down_after_claim = False
            self.down = True
        return result


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_an_outage_that_ends_and_starts_again_within_one_turn_is_two_episodes() -> None:
    """Given a leader that cannot reach Redis, When a turn's claim is
    granted (the outage ended) and a later command of the same turn fails
    (a new outage), Then each outage is one WARNING and each end one: the
    granted claim is a state change, not lost inside one long episode (under
    load the real test in test_write_refusals.py saw one recovery, not two)."""
    time = FakeTime()
    server = _Outage(now_ms=time.now_ms)
    broker = StubBroker()
    dramatiq.actor(lambda: None, actor_name=ACTOR, broker=broker)
    declared = [
        bind_schedule(
            ACTOR, "default", Schedule("* * * * * *"), timezone="UTC", catch_up="each", catch_up_window=3_600_000
        )
    ]
    store = InMemoryStore(
        server,
        clock=ServerClock(monotonic=time.monotonic, wall=time.wall),
        ttl_ms=LEASE_MS,
        candidate=Candidate(host="a", pid=0),
    )
    lines = _Lines()
    logger = logging.Logger("episodes")  # not registered: no handler but ours
    logger.addHandler(lines)
    leader: LeaderThread[Any] = LeaderThread(
        store=store,
        boundary=BrokerBoundary(broker, Boundary.PLAIN, keys=store.keys, mark_ms=LEASE_MS),
        declared=declared,
        timing=Timing.for_lease(LEASE_MS),
        logger=logger,
        pace=False,
    )

    def turns(n: int) -> None:
        for _ in range(n):
            time.ms += 100
            leader.step()

    try:
        turns(30)  # leading, firing
        assert leader.leadership is not None
        fired = len(broker.queues["default"].queue)
        server.down = True
        turns(10)
        # The outage ends; the turn's claim (the ticks missed) is granted,
        # and Redis is gone again before the turn ends.
        server.down, server.down_after_claim = False, True
        turns(1)
        assert server.down, "the turn made no claim"
        turns(10)
        server.down = False
        turns(30)
        assert len(broker.queues["default"].queue) > fired
    finally:
        leader.stopping.close()
    kinds = [
        "down" if "cannot reach" in line else "up" if "reaches Redis again" in line else line for line in lines.lines
    ]
    assert kinds == ["down", "up", "down", "up"], lines.lines
