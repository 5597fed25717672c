"""The fire path's per-batch shortcuts keep what they stand for (issue 32):
message bodies filled from a schedule's template are byte for byte the
full encoding, the broker's enqueue hooks run per batch with
``Broker.emit_before``/``emit_after``'s semantics (a veto, a failing hook
logged), and building ahead stops before the next tick instead of making
it late.  In-process, on a StubBroker with a Redis namespace (the payloads
are only encoded, never sent)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import SkipMessage

from dramatiq_cron_middleware.leader.tick_queue import BUILD_MARGIN_MS, TickQueue
from dramatiq_cron_middleware.schedules.planner import _MESSAGE_IDS, jitter_ms, message_for, message_id_for
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, Schedule, schedules_for_actor
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.codes import ClaimResult
from dramatiq_cron_middleware.store.keys import Keys
from tests.support.ticks import load

NOW = 1_800_000_000_000  # a whole minute


def _schedule(actor: str, **options: Any) -> BoundSchedule:
    return schedules_for_actor(
        actor,
        "default",
        Schedule("* * * * * *", **options),
        timezone="Europe/Paris",
        catch_up="each",
        catch_up_window=300_000,
    )[0]


def _boundary(broker: dramatiq.Broker) -> BrokerBoundary:
    broker.namespace = "dramatiq"  # type: ignore[attr-defined]
    return BrokerBoundary(broker, Boundary.IN_CLAIM, keys=Keys("p"), mark_ms=60_000)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"jitter": 5_000, "overlap": "skip"},
        {"args": ["2026-12-02T00:00:01+01:00", 'a "quoted" \\ value'], "kwargs": {"eta": 1}, "max_age": 9},
    ],
)
def test_a_body_filled_from_its_template_is_the_full_encoding(options: dict[str, Any]) -> None:
    """Given a schedule (plain; jittered, so delayed with an eta; with
    arguments that look like the values cut out), when the bodies of 50
    consecutive ticks are made with its template, then each equals the
    message's own encoding, and decodes to the same message."""
    boundary = _boundary(StubBroker())
    schedule = _schedule("job", **options)
    for n in range(50):
        tick = NOW + n * 1000
        message = message_for(schedule, tick, prefix="p", timestamp_ms=tick - n)
        delay = jitter_ms(schedule, message.message_id)
        payload = boundary.payload(message, delay, now_ms=NOW + 7 * n, template=(schedule.id, schedule))
        assert payload.body == payload.message.encode().decode("utf-8"), n
        assert json.loads(payload.body)["options"]["cron_tick"] == message.options["cron_tick"]


def test_a_replaced_schedule_gets_a_new_template() -> None:
    """Given a template made for one definition of a schedule, when a new
    definition with the same id (other arguments) fires, then its bodies
    carry the new arguments."""
    boundary = _boundary(StubBroker())
    old, new = _schedule("job", args=[1]), _schedule("job", args=[2])
    for schedule in (old, old, new, new):
        message = message_for(schedule, NOW, prefix="p", timestamp_ms=NOW)
        body = boundary.payload(message, None, now_ms=NOW, template=(schedule.id, schedule)).body
        assert json.loads(body)["args"] == list(schedule.args)


def test_message_ids_are_uuid5_of_prefix_schedule_and_tick() -> None:
    """The deterministic message id is exactly uuid5 (every process, every
    version, derives the same id)."""
    for n in range(200):
        sid, tick = f"job{n}:é", NOW + n
        assert message_id_for(sid, tick, prefix="p|x") == str(uuid.uuid5(_MESSAGE_IDS, f"p|x|{sid}|{tick}"))


class _Veto(dramatiq.Middleware):
    def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        if message.options.get("cron_schedule") == "vetoed":
            raise SkipMessage("no")


class _Broken(dramatiq.Middleware):
    def __init__(self) -> None:
        self.after: list[str] = []

    def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        raise ValueError("a bug in a hook")

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        self.after.append(message.message_id)
        raise ValueError("a bug in a hook")


def test_hooks_per_batch_veto_and_log_as_the_broker_does(caplog: pytest.LogCaptureFixture) -> None:
    """Given a middleware that vetoes one schedule's messages (a
    MiddlewareError) and one whose hooks raise, when a batch of payloads
    goes through the per-batch hooks, then the vetoed one is dropped (None),
    the failing hook is logged CRITICAL per message as
    ``Broker.emit_before`` does and vetoes nothing, and every after hook
    runs for every message."""
    broker = StubBroker()
    broken = _Broken()
    broker.add_middleware(_Veto())
    broker.add_middleware(broken)
    boundary = _boundary(broker)
    payloads = [
        boundary.payload(message_for(_schedule(name), NOW, prefix="p", timestamp_ms=NOW), None, now_ms=NOW)
        for name in ("kept", "vetoed", "other")
    ]
    with caplog.at_level("CRITICAL"):
        kept = boundary.before_many([*payloads, None])
    assert [p is not None for p in kept] == [True, False, True, False]
    assert len([r for r in caplog.records if "before_enqueue" in r.getMessage()]) == 2
    boundary.after_many([p for p in kept if p is not None])
    assert broken.after == [payloads[0].message.message_id, payloads[2].message.message_id]


def test_building_ahead_stops_before_the_next_tick_and_resumes_after_it() -> None:
    """Given 300 per-second schedules just decided at NOW, when building
    ahead starts BUILD_MARGIN_MS before the next tick, then nothing is built
    (the tick fires first, its messages made on the fire path, stamped with
    the batch's instant); and started early enough, every next message is
    built ahead (stamped with its tick)."""
    clock = {"now": NOW}
    schedules = {s.id: s for s in (_schedule(f"job{i}") for i in range(300))}
    queue = TickQueue(schedules, prefix="p", now_ms=lambda: clock["now"])
    load(queue, {sid: NOW - 1000 for sid in schedules})
    batch = queue.take(NOW, 1000)
    queue.decided(batch, [ClaimResult.FIRE] * len(batch), NOW)
    clock["now"] = NOW + 1000 - BUILD_MARGIN_MS
    queue.build_ahead(clock["now"])
    batch = queue.take(NOW + 1003, 1000)
    assert len(batch) == 300
    assert {p.message.message_timestamp for p in batch if p.message is not None} == {NOW + 1003}
    queue.decided(batch, [ClaimResult.FIRE] * len(batch), NOW + 1003)
    clock["now"] = NOW + 1010  # long before the tick at NOW + 2000
    queue.build_ahead(clock["now"])
    batch = queue.take(NOW + 2005, 1000)
    assert len(batch) == 300
    assert {p.message.message_timestamp for p in batch if p.message is not None} == {NOW + 2000}
