"""The Python API on ``CronMiddleware``: get, add (create-only or replace),
update, remove, add_many, list, pause, resume and trigger, each recorded in
the history (who, when, what) and logged at INFO; against a real
redis-server, from a process that runs no worker."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, CronScheduleError, Schedule
from dramatiq_cron_middleware.store.operator import RedisOperator
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedule, RuntimeSchedules
from dramatiq_cron_middleware.testing import CronSimulator
from tests.support.redis_server import RedisServer

HISTORY = "{dramatiq-cron}:history"


@dataclass
class App:
    broker: RedisBroker
    cron: CronMiddleware
    redis: redis.Redis

    def history(self) -> list[dict[str, str]]:
        return [fields for _, fields in self.redis.xrange(HISTORY)]  # type: ignore[union-attr]


@pytest.fixture
def app(redis_server: RedisServer) -> Iterator[App]:
    broker = RedisBroker(url=redis_server.url)
    cron = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(cron)

    def report(tenant: int = 0, full: bool = False) -> None:
        pass

    def cleanup() -> None:
        pass

    dramatiq.actor(report, broker=broker, queue_name="reports")
    dramatiq.actor(cleanup, broker=broker, cron=["0 * * * *", Schedule("30 1 * * *", name="nightly")])
    client = redis_server.client()
    try:
        yield App(broker=broker, cron=cron, redis=client)
    finally:
        broker.close()
        client.close()


def test_a_new_schedule_is_revision_1_whatever_was_written_before(app: App) -> None:
    for n in range(3):
        app.cron.add("report", f"{n} * * * *", name=f"other-{n}")
    stored = app.cron.add("report", Schedule("0 9 * * *", timezone="Europe/Berlin"), name="t1")
    assert stored.revision == 1
    assert app.cron.add("report", "0 10 * * *", name="t1").revision == 2
    app.cron.remove("report:t1")
    assert app.cron.add("report", "0 10 * * *", name="t1").revision == 1
    assert app.cron.get("report:t1") is not None
    assert app.cron.get("report:t1").revision == 1  # type: ignore[union-attr]


def test_add_returns_datetimes_beside_the_epoch_milliseconds(app: App) -> None:
    stored = app.cron.add("report", Schedule("0 9 * * *", timezone="Europe/Berlin"), name="t1")
    assert stored.next_at is not None and stored.next_ms is not None
    assert stored.next_at.tzinfo == ZoneInfo("Europe/Berlin")
    assert stored.next_at.timestamp() * 1000 == stored.next_ms and (stored.next_at.hour, stored.next_at.minute) == (
        9,
        0,
    )
    assert stored.created_at == dt.datetime.fromtimestamp(stored.created_ms / 1000, tz=dt.timezone.utc)


def test_add_with_replace_false_creates_only_and_refuses_an_existing_name(app: App) -> None:
    app.cron.add("report", Schedule("0 9 * * *", kwargs={"tenant": 1}), name="t1", replace=False)
    with pytest.raises(CronScheduleError, match=r"'report:t1' already exists"):
        app.cron.add("report", "0 10 * * *", name="t1", replace=False)
    kept = app.cron.get("report:t1")
    assert kept is not None and kept.schedule.expression == "0 9 * * *" and kept.revision == 1
    with pytest.raises(CronScheduleError, match="already exists"):
        app.cron.add_many([("report", "0 1 * * *", "t2"), ("report", "0 1 * * *", "t1")], replace=False)
    assert app.cron.get("report:t2") is None  # one refused item writes nothing


def test_update_changes_what_is_given_and_keeps_the_rest(app: App) -> None:
    """Given a schedule with kwargs, a zone and options, when only its
    expression is updated, the kwargs, zone and options stay."""
    app.cron.add(
        "report",
        Schedule("0 9 * * *", timezone="Europe/Berlin", kwargs={"tenant": 42}, jitter=5000, options={"max_retries": 1}),
        name="t42",
    )
    after = app.cron.update("report:t42", expression="0 10 * * *")
    s = after.schedule
    assert (s.expression, s.timezone, s.kwargs, s.jitter, s.options) == (
        "0 10 * * *",
        "Europe/Berlin",
        {"tenant": 42},
        5000,
        {"max_retries": 1},
    )
    assert after.revision == 2
    assert app.cron.update("report:t42", every=60_000).schedule.every == 60_000
    back = app.cron.update("report:t42", expression="0 11 * * *").schedule
    assert (back.every, back.expression) == (None, "0 11 * * *")


def test_update_refuses_unknown_options_a_rename_and_a_missing_schedule(app: App) -> None:
    app.cron.add("report", "0 9 * * *", name="t1")
    with pytest.raises(CronScheduleError, match=r"'report:t1': unknown option\(s\) expresion"):
        app.cron.update("report:t1", expresion="0 10 * * *")
    with pytest.raises(CronScheduleError, match="name cannot be changed"):
        app.cron.update("report:t1", name="t2")
    with pytest.raises(CronScheduleError, match="no runtime schedule 'report:nosuch'"):
        app.cron.update("report:nosuch", jitter=1)
    with pytest.raises(CronScheduleError, match=r"actor 'report', cron '61 \* \* \* \*'"):
        app.cron.update("report:t1", expression="61 * * * *")
    assert app.cron.get("report:t1").revision == 1  # type: ignore[union-attr]


def test_remove_takes_an_id_or_an_actor_and_a_name(app: App) -> None:
    app.cron.add("report", "0 9 * * *", name="t1")
    app.cron.add("report", "0 9 * * *", name="t2")
    assert app.cron.remove("report:t1") is True
    assert app.cron.remove("report", "t2") is True
    assert app.cron.remove("report:t2") is False
    with pytest.raises(CronScheduleError, match="'actor:name'"):
        app.cron.remove("report")


def test_every_change_is_recorded_in_the_history_with_who_and_logged_at_info(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dramatiq_cron_middleware")
    app.cron.add("report", Schedule("0 9 * * *", kwargs={"tenant": 1}), name="t1", who="alice")
    app.cron.update("report:t1", expression="0 10 * * *", kwargs={"tenant": 2}, who="bob")
    app.cron.pause("report:t1", who="carol")
    app.cron.resume("report:t1")
    app.cron.pause(actor="cleanup", who="cli")
    app.cron.trigger("cleanup/nightly", who="dave")
    app.cron.remove("report:t1", who="erin")
    actions = [e for e in app.history() if "who" in e]  # an update of the ticks also records "rebased"
    entries = [(e["outcome"], e["schedule"], e["who"]) for e in actions]
    assert entries == [
        ("add", "report:t1", "alice"),
        ("update", "report:t1", "bob"),
        ("pause", "report:t1", "carol"),
        ("resume", "report:t1", "api"),
        ("pause", "cleanup:*", "cli"),
        ("triggered", "cleanup/nightly", "dave"),
        ("remove", "report:t1", "erin"),
    ]
    update = actions[1]
    assert update["detail"] == "revision 2; expression '0 9 * * *' -> '0 10 * * *'; kwargs tenant changed"
    assert actions[0]["detail"] == "revision 1: 0 9 * * * in UTC"  # no argument values
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and " by " in r.getMessage()]
    assert "Cron report:t1: update by bob: " + update["detail"] + "." in logged
    assert "Cron cleanup:*: pause by cli." in logged
    assert len(logged) == 7
    # The operator's reader shows who did it.
    read = RedisOperator(client=app.cron.runtime.client, keys=app.cron.keys).history(limit=10)
    assert [e.who for e in read][:2] == ["erin", "dave"]


def test_a_pause_or_resume_that_changes_nothing_says_so_and_records_nothing(app: App) -> None:
    first = app.cron.pause("cleanup")
    again = app.cron.pause("cleanup")
    assert (first.changed, again.changed, first.target) == (True, False, "cleanup")
    assert first.at.tzinfo == dt.timezone.utc
    assert app.cron.resume("cleanup").changed and not app.cron.resume("cleanup").changed
    assert [e["outcome"] for e in app.history()] == ["pause", "resume"]


def test_pause_resume_and_trigger_name_what_is_unknown(app: App) -> None:
    with pytest.raises(CronScheduleError, match="unknown cron schedule 'nosuch'"):
        app.cron.pause("nosuch")
    with pytest.raises(CronScheduleError, match="unknown cron actor 'nosuch'"):
        app.cron.pause(actor="nosuch")
    with pytest.raises(CronScheduleError, match="unknown cron schedule 'report:nosuch'"):
        app.cron.trigger("report:nosuch")
    with pytest.raises(CronScheduleError, match="not both"):
        app.cron.pause("cleanup", actor="cleanup")
    with pytest.raises(CronScheduleError, match="who must name who acts"):
        app.cron.pause("cleanup", who="")
    assert app.history() == []


def test_trigger_enqueues_a_manual_message_and_returns_when(app: App) -> None:
    app.cron.add("report", Schedule("0 9 * * *", kwargs={"tenant": 7}), name="t7")
    done = app.cron.trigger("report:t7")
    assert done.queue_name == "reports"
    assert done.recorded_at.tzinfo == dt.timezone.utc
    assert app.redis.llen("dramatiq:reports") == 1
    (entry,) = [e for e in app.history() if e["outcome"] == "triggered"]
    assert (entry["message_id"], entry["who"], entry["detail"]) == (done.message_id, "api", "manual")


def test_list_pages_runtime_schedules(app: App) -> None:
    app.cron.add_many([("report", "0 9 * * *", f"t{n}") for n in range(5)])
    page = app.cron.list(limit=3)
    assert [r.name for r in page.items] == ["t0", "t1", "t2"] and page.total == 5
    rest = app.cron.list(cursor=page.cursor)
    assert [r.name for r in rest.items] == ["t3", "t4"] and rest.cursor is None


def test_with_a_simulator_attached_pause_and_resume_act_on_the_simulated_leader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An app's tests call the same API: pause stops the simulated firing,
    resume restores it, and both are logged; a trigger enqueues a manual
    message on the broker, recorded in the simulated history."""
    caplog.set_level(logging.INFO, logger="dramatiq_cron_middleware")
    broker = StubBroker()
    cron = CronMiddleware()
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="cleanup", broker=broker, cron="* * * * *")
    simulator = CronSimulator(broker, now=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    try:
        assert cron.pause("cleanup", who="test").changed
        assert simulator.advance(by=dt.timedelta(minutes=3)) == []
        assert cron.resume("cleanup").changed and not cron.resume("cleanup").changed
        assert len(simulator.advance(by=dt.timedelta(minutes=2))) == 2
        done = cron.trigger("cleanup")
        [message] = [m for m in broker.queues["default"].queue if b'"cron_manual":true' in m]
        assert done.message_id.encode() in message
        assert [e.outcome for e in cron.service.history(limit=1)] == ["triggered"]
    finally:
        simulator.close()
    logged = [r.getMessage() for r in caplog.records if " by " in r.getMessage()]
    assert logged == [
        "Cron cleanup: pause by test.",
        "Cron cleanup: resume by api.",
        "Cron cleanup: triggered by api: manual.",
    ]


def test_an_update_never_undoes_a_write_that_came_between_its_read_and_its_write(app: App) -> None:
    """Given a write by another process landing just after an update read
    the schedule, the update's write is refused by Redis (compare-and-set
    on the fencing revision) and done again on what is stored now: both
    changes stay."""
    keys = app.cron.keys
    client = app.cron.runtime.client
    other = RuntimeSchedules(client, keys, resolve_actor=lambda actor: ActorInfo("report", "reports"))

    class RacedOnce(RuntimeSchedules):
        raced = False

        def get(self, actor: object, name: str) -> RuntimeSchedule | None:
            found = super().get(actor, name)
            if not self.raced:
                self.raced = True
                other.add("report", Schedule("0 9 * * *", kwargs={"tenant": 2}), name="t1")
            return found

    app.cron.add("report", Schedule("0 9 * * *", kwargs={"tenant": 1}), name="t1")
    updating = RacedOnce(client, keys, resolve_actor=lambda actor: ActorInfo("report", "reports"))
    before, after = updating.update("report:t1", {"jitter": 5000})
    assert updating.raced
    assert (after.schedule.kwargs, after.schedule.jitter, after.revision) == ({"tenant": 2}, 5000, 3)
    assert before.schedule.kwargs == {"tenant": 2}  # what the retry read


def test_a_trigger_on_a_stub_broker_outside_a_simulator_is_refused(redis_server: RedisServer) -> None:
    """With Redis configured but a StubBroker (a script that loads the app),
    a triggered message would only live in this process: refused, nothing
    recorded; the simulator's broker is the one whose workers get it."""
    broker = StubBroker()
    cron = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="job", broker=broker, cron="0 9 * * *")
    with pytest.raises(CronScheduleError, match="StubBroker"):
        cron.trigger("job")
    assert cron.service.history(limit=10) == [] and broker.queues["default"].qsize() == 0
    broker.close()
