"""Owed ticks of runtime schedules are checked before each retry: those of
a removed or replaced definition are dropped (the store records them),
never sent; while the check cannot be made they wait, and declared ticks
are paid regardless.  In-process, on a StubBroker and injected clocks; the
check against Redis is tests/test_owed_removal.py."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import pytest
from dramatiq import Message
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware.errors import CronUnavailableError
from dramatiq_cron_middleware.leader.owed import Owed, OwedQueue
from dramatiq_cron_middleware.schedules.planner import message_for
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, Schedule, schedules_for_actor
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.keys import Keys

NOW = 1_800_000_000_000


class Broker(StubBroker):
    """Refuses every message until told otherwise (a broker that is down)."""

    down = True

    def enqueue(self, message, *, delay=None):  # type: ignore[no-untyped-def]
        if self.down:
            raise ConnectionError("broker down")
        return super().enqueue(message, delay=delay)


def schedule(actor: str, *, runtime: bool) -> BoundSchedule:
    bound = schedules_for_actor(
        actor, "default", Schedule("* * * * * *", name="n"), timezone="UTC", catch_up="each", catch_up_window=300_000
    )[0]
    return dataclasses.replace(bound, source="runtime", revision=7) if runtime else bound


class Store:
    """What RuntimeSchedules.drop_stale answers: the removed ids are stale."""

    def __init__(self) -> None:
        self.removed: set[str] = set()
        self.down = False
        self.asked: list[list[str]] = []

    def drop_stale(self, ticks: Sequence[tuple[BoundSchedule, int, str]]) -> list[bool]:
        if self.down:
            raise CronUnavailableError("Redis did not answer")
        self.asked.append([s.id for s, _, _ in ticks])
        return [s.id in self.removed for s, _, _ in ticks]


def owed_queue(broker: Broker, store: Store, mono: list[float]) -> OwedQueue:
    broker.declare_queue("default")
    return OwedQueue(
        boundary=BrokerBoundary(broker, Boundary.PLAIN, keys=Keys("p"), mark_ms=60_000),
        logger=logging.getLogger("test.owed"),
        now_ms=lambda: NOW + 2000,
        monotonic=lambda: mono[0],
        drop_stale=store.drop_stale,
    )


def sent(broker: Broker) -> list[str]:
    return [Message.decode(m).options["cron_schedule"] for m in broker.queues["default"].queue]


def test_owed_ticks_of_a_removed_runtime_schedule_are_dropped_before_a_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Given a declared and two runtime schedules whose enqueue failed (the
    broker is down), when one runtime schedule is removed and the broker
    comes back, then the retry sends the declared one and the runtime one
    still defined, drops the removed one's ticks (one WARNING naming it) and
    never asks about them again."""
    broker, store, mono = Broker(), Store(), [0.0]
    owed = owed_queue(broker, store, mono)
    declared, kept, removed = (
        schedule("plain", runtime=False),
        schedule("kept", runtime=True),
        schedule("gone", runtime=True),
    )
    for tick in (NOW, NOW + 1000):
        owed.send([Owed(s, tick, message_for(s, tick, prefix="p")) for s in (declared, kept, removed)])
    assert len(owed) == 6
    store.removed.add(removed.id)
    broker.down = False
    mono[0] += 60
    with caplog.at_level(logging.WARNING, logger="test.owed"):
        owed.pay()
    assert sorted(sent(broker)) == sorted([declared.id, kept.id] * 2)
    assert len(owed) == 0 and [sorted(ids) for ids in store.asked] == [sorted([kept.id, removed.id] * 2)]
    dropped = [r.getMessage() for r in caplog.records if "Dropped" in r.getMessage()]
    assert len(dropped) == 1 and removed.id in dropped[0] and kept.id not in dropped[0]


def test_while_the_check_cannot_be_made_runtime_ticks_wait_and_declared_ones_are_paid() -> None:
    broker, store, mono = Broker(), Store(), [0.0]
    owed = owed_queue(broker, store, mono)
    declared, runtime = schedule("plain", runtime=False), schedule("kept", runtime=True)
    owed.send([Owed(s, NOW, message_for(s, NOW, prefix="p")) for s in (declared, runtime)])
    broker.down = False
    store.down = True
    mono[0] += 60
    owed.pay()
    assert sent(broker) == [declared.id] and len(owed) == 1
    store.down = False
    mono[0] += 60
    owed.pay()
    assert sent(broker) == [declared.id, runtime.id] and len(owed) == 0
