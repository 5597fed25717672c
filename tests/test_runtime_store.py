"""Runtime schedules stored in Redis: what is written, what the leader reads.

Against a real redis-server (the ``redis_server`` fixture), from a process
that runs no worker: the middleware is added to a StubBroker and actors are
declared, exactly as a web process would.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import (
    CronConfigurationError,
    CronMiddleware,
    CronScheduleError,
    CronUnavailableError,
    Schedule,
)
from dramatiq_cron_middleware.schedules.cadence import Cadence
from dramatiq_cron_middleware.schedules.schedule import NEVER, BoundSchedule
from dramatiq_cron_middleware.store.runtime import MAX_DEFINITION_BYTES, RuntimeSchedule, RuntimeSchedules
from dramatiq_cron_middleware.store.runtime_definition import bind_fully
from tests.support.redis_server import RedisServer, free_port

P = "{dramatiq-cron}"
RUNTIME, REVS, VERSION, CHANGES, IDS = (f"{P}:runtime{s}" for s in ("", ":revs", ":version", ":changes", ":ids"))


@dataclass
class App:
    """A broker with the middleware and two declared actors, no worker."""

    broker: StubBroker
    cron: CronMiddleware
    report: dramatiq.Actor[Any, Any]
    redis: redis.Redis

    @property
    def store(self) -> RuntimeSchedules:
        return self.cron.runtime


def make_app(url: str, client: redis.Redis | None = None, **middleware: Any) -> App:
    broker = StubBroker()
    cron = CronMiddleware(redis=url, **middleware)
    broker.add_middleware(cron)

    def report(tenant: int = 0) -> None:
        pass

    def cleanup() -> None:
        pass

    actor = dramatiq.actor(report, broker=broker, queue_name="reports", time_limit=60_000)
    dramatiq.actor(cleanup, broker=broker, cron="0 * * * *")
    return App(broker=broker, cron=cron, report=actor, redis=client or redis.Redis.from_url(url, decode_responses=True))


@pytest.fixture
def app(redis_server: RedisServer) -> Iterator[App]:
    yield make_app(redis_server.url, redis_server.client())


def test_an_added_schedule_round_trips_as_json_and_binds_like_a_declared_one(app: App) -> None:
    stored = app.cron.add(
        app.report,
        Schedule("0 9 * * mon", timezone="Europe/Berlin", kwargs={"tenant": 42}, jitter=5000, overlap="skip"),
        name="tenant-42",
    )
    assert stored.id == "report:tenant-42"
    assert stored.schedule.source == "runtime"
    assert stored.revision == 1
    assert stored.next_ms is not None and stored.next_ms == stored.schedule.next_after(stored.updated_ms)
    assert stored.created_ms == stored.updated_ms > 0
    # Defaults and the actor's queue and time limit are resolved at the call.
    bound = stored.schedule
    assert (bound.queue_name, bound.catch_up, bound.catch_up_window) == ("reports", "each", 300_000)
    assert bound.overlap_ttl == 60_000 + 600_000 + 5000

    definition = json.loads(app.redis.hget(RUNTIME, "report:tenant-42"))  # type: ignore[arg-type]
    assert definition["v"] == 1
    assert definition["actor"] == "report" and definition["expression"] == "0 9 * * mon"
    assert definition["timezone"] == "Europe/Berlin" and definition["kwargs"] == {"tenant": 42}
    assert definition["rev"] == 1 and definition["created"] == stored.created_ms
    assert app.redis.hget(REVS, "report:tenant-42") == "1"

    assert app.store.get("report", "tenant-42") == stored
    version, everything = app.store.load_all()
    assert version == 1
    assert everything == {"report:tenant-42": bound}


def test_replacing_a_schedule_bumps_its_revision_and_the_version_and_keeps_created(app: App) -> None:
    first = app.cron.add("report", "0 9 * * *", name="daily")
    second = app.cron.add("report", "30 9 * * *", name="daily")
    assert (first.revision, second.revision) == (1, 2)
    assert second.created_ms == first.created_ms
    assert second.schedule.expression == "30 9 * * *"
    assert app.store.version() == 2
    assert app.redis.hget(REVS, "report:daily") == "2"
    assert app.redis.zscore(CHANGES, "report:daily") == 2
    assert app.redis.hlen(RUNTIME) == 1


def test_a_removal_is_a_tombstone_in_the_changes_and_takes_the_revision_with_it(app: App) -> None:
    app.cron.add("report", "0 9 * * *", name="daily")
    assert app.cron.remove(app.report, "daily") is True
    assert app.cron.remove("report", "daily") is False  # nothing left: no version bump
    assert app.store.get("report", "daily") is None
    assert not app.redis.hexists(REVS, "report:daily")
    assert not app.redis.hexists(RUNTIME, "report:daily")
    assert app.redis.zscore(CHANGES, "report:daily") == 2
    assert app.store.version() == 2
    assert app.store.changes_since(1) == (2, {"report:daily": None})


def test_changes_since_returns_only_what_changed_after_a_version_as_it_is_now(app: App) -> None:
    for n in range(5):
        app.cron.add("report", f"{n} * * * *", name=f"s{n}")  # versions 1..5
    app.cron.add("report", "59 * * * *", name="s1")  # 6: s1 replaced
    app.cron.remove("report", "s3")  # 7
    version, changes = app.store.changes_since(4)
    assert version == 7
    assert set(changes) == {"report:s1", "report:s3", "report:s4"}
    s1 = changes["report:s1"]
    assert s1 is not None and s1.expression == "59 * * * *" and s1.revision == 6
    assert changes["report:s3"] is None
    assert app.store.changes_since(7) == (7, {})
    assert app.store.changes_since(0)[0] == 7
    assert len(app.store.changes_since(0)[1]) == 5


def test_changes_since_pages_through_many_changes_without_missing_one(app: App) -> None:
    app.store.add_many([("report", f"{n % 60} * * * *", f"t{n}") for n in range(2500)])
    version, changes = app.store.changes_since(0)
    assert version == 2500
    assert len(changes) == 2500
    assert sorted(s.revision for s in changes.values() if s is not None) == list(range(1, 2501))
    assert len(app.store.changes_since(1999)[1]) == 501


def test_a_wiped_store_is_reported_by_a_version_below_the_one_known(app: App) -> None:
    for n in range(3):
        app.cron.add("report", "0 * * * *", name=f"s{n}")
    app.redis.flushall()
    app.cron.add("report", "0 * * * *", name="after")
    assert app.store.changes_since(3) == (1, {})


def test_a_corrupt_definition_is_skipped_with_exactly_one_warning_naming_it(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    app.cron.add("report", "0 9 * * *", name="good")
    app.cron.add("report", "0 10 * * *", name="bad")
    app.redis.hset(RUNTIME, "report:bad", '{"v": 1, "actor": "report", "name"')
    with caplog.at_level(logging.WARNING):
        version, everything = app.store.load_all()
    assert version == 2
    assert list(everything) == ["report:good"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "'report:bad'" in warnings[0].getMessage() and RUNTIME in warnings[0].getMessage()


CORRUPT: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("not JSON", lambda raw: "{oops"),
    ("a list", lambda raw: "[1, 2]"),
    ("a newer format", lambda raw: json.dumps({**raw, "v": 2})),
    ("a missing field", lambda raw: json.dumps({k: v for k, v in raw.items() if k != "queue"})),
    ("a bad expression", lambda raw: json.dumps({**raw, "expression": "61 * * * *"})),
    ("a bad zone", lambda raw: json.dumps({**raw, "timezone": "Mars/Base"})),
    ("a zone that is not a name", lambda raw: json.dumps({**raw, "timezone": ["UTC"]})),
    ("args not a list", lambda raw: json.dumps({**raw, "args": "abc"})),
    ("another actor", lambda raw: json.dumps({**raw, "actor": "cleanup"})),
    ("an offset on a cron expression", lambda raw: json.dumps({**raw, "offset": 5})),
    ("a bool offset", lambda raw: json.dumps({**raw, "expression": None, "every": 60_000, "offset": True})),
    (
        "an offset of a whole period",
        lambda raw: json.dumps({**raw, "expression": None, "every": 60_000, "offset": 60_000}),
    ),
    ("start after end", lambda raw: json.dumps({**raw, "start": 2_000_000, "end": 1_000_000})),
    ("a float bound", lambda raw: json.dumps({**raw, "start": 1.5})),
    ("a bound before 1970", lambda raw: json.dumps({**raw, "end": -1})),
]


@pytest.mark.parametrize("corrupt", [c[1] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_no_corrupt_definition_stops_the_others_from_loading(
    app: App, caplog: pytest.LogCaptureFixture, corrupt: Callable[[dict[str, Any]], str]
) -> None:
    good = app.cron.add("report", "0 9 * * *", name="good")
    stored = app.cron.add("report", "0 10 * * *", name="x")
    raw = json.loads(app.redis.hget(RUNTIME, stored.id))  # type: ignore[arg-type]
    app.redis.hset(RUNTIME, stored.id, corrupt(raw))
    with caplog.at_level(logging.WARNING):
        assert app.store.load_all()[1] == {good.id: good.schedule}
        # A change to it reads as "no longer firable", never as an exception.
        assert app.store.changes_since(1)[1] == {stored.id: None}
        assert app.store.get("report", "x") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3 and all("'report:x'" in w for w in warnings), warnings  # one per read


def test_a_definition_that_describes_another_schedule_is_skipped(app: App, caplog: pytest.LogCaptureFixture) -> None:
    stored = app.cron.add("report", "0 10 * * *", name="x")
    text = app.redis.hget(RUNTIME, stored.id)
    app.redis.hset(RUNTIME, "report:y", text)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        assert set(app.store.load_all()[1]) == {"report:x"}
    assert "'report:y'" in caplog.text


def test_runtime_and_declared_identities_never_collide(app: App) -> None:
    (declared,) = app.cron.all_schedules()
    runtime = app.cron.add("cleanup", "0 * * * *", name="0").schedule
    assert declared.id == "cleanup"
    assert runtime.id == "cleanup:0"
    assert ":" not in declared.id and runtime.id.count(":") == 1


def test_an_interval_and_a_bounded_schedule_are_stored_and_read_back(app: App) -> None:
    start = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    stored = app.cron.add(
        "report",
        Schedule(every=90_000, offset=15_000, start=start, end=int(start.timestamp() * 1000) + 3_600_000),
        name="iv",
    )
    bound = stored.schedule
    assert (bound.every, bound.offset, bound.start) == (90_000, 15_000, int(start.timestamp() * 1000))
    assert stored.next_ms == bound.next_after(bound.start - 1) and stored.next_ms >= bound.start  # type: ignore[operator]
    assert app.store.load_all()[1]["report:iv"] == bound
    ended = app.cron.add("report", Schedule("* * * * *", end=1_000_000), name="ended")
    assert ended.next_ms is None and ended.schedule.next_after(2_000_000) == NEVER


def test_listing_filters_by_actor_and_search_and_pages_with_a_cursor(app: App) -> None:
    app.store.add_many([("report", "0 * * * *", f"tenant-{n:03d}") for n in range(250)])
    app.cron.add("cleanup", "0 * * * *", name="tenant-007")

    first = app.cron.list(actor="report", limit=100)
    assert first.total == 250 and len(first.items) == 100 and first.cursor == "report:tenant-099"
    seen = [i.id for i in first.items]
    page = first
    while page.cursor is not None:
        page = app.cron.list(actor="report", limit=100, cursor=page.cursor)
        seen += [i.id for i in page.items]
    assert seen == [f"report:tenant-{n:03d}" for n in range(250)]

    everything = app.cron.list(limit=1000)
    assert everything.total == 251 and everything.cursor is None
    assert everything.items[0].id == "cleanup:tenant-007"

    found = app.cron.list(search="TENANT-00", limit=5)
    assert [i.id for i in found.items] == ["cleanup:tenant-007"] + [f"report:tenant-00{n}" for n in range(4)]
    assert found.total is None and found.cursor == "report:tenant-003"
    rest = app.cron.list(search="tenant-00", limit=100, cursor=found.cursor)
    assert [i.id for i in rest.items] == [f"report:tenant-00{n}" for n in range(4, 10)] and rest.cursor is None
    assert app.cron.list(actor="nobody").items == []


def test_a_schedule_whose_actor_is_no_longer_declared_is_still_read_and_removable(redis_server: RedisServer) -> None:
    app = make_app(redis_server.url)
    app.cron.add("report", "0 9 * * *", name="daily")
    other = make_app(redis_server.url)  # a deploy without "report"
    del other.broker.actors["report"]
    assert set(other.store.load_all()[1]) == {"report:daily"}
    assert [i.id for i in other.cron.list().items] == ["report:daily"]
    assert other.cron.remove("report", "daily") is True


BAD = [
    ("unknown actor", ("nobody", "0 * * * *", "x"), "'nobody'"),
    ("actor not a name", (42, "0 * * * *", "x"), "42"),
    ("actor with a colon", ("a:b", "0 * * * *", "x"), "'a:b'"),
    ("bad expression", ("report", "61 * * * *", "x"), "61"),
    ("bad zone", ("report", partial(Schedule, "0 * * * *", timezone="Mars/Base"), "x"), "Mars/Base"),
    ("args not JSON", ("report", partial(Schedule, "0 * * * *", args=(object(),)), "x"), "args"),
    ("kwargs not JSON", ("report", partial(Schedule, "0 * * * *", kwargs={"d": dt.date(2026, 1, 1)}), "x"), "kwargs"),
    ("name too long", ("report", "0 * * * *", "n" * 65), "n" * 65),
    ("name empty", ("report", "0 * * * *", ""), "''"),
    ("name with a space", ("report", "0 * * * *", "a b"), "'a b'"),
    ("name with a colon", ("report", "0 * * * *", "a:b"), "'a:b'"),
    ("name with a trailing newline", ("report", "0 * * * *", "a\n"), "'a\\n'"),
    ("name not a string", ("report", "0 * * * *", 7), "7"),
    ("two names", ("report", Schedule("0 * * * *", name="other"), "x"), "'other'"),
    ("schedule not a schedule", ("report", 5, "x"), "5"),
    ("every too short", ("report", partial(Schedule, every=10), "x"), "10"),
    ("too big", ("report", Schedule("0 * * * *", kwargs={"tenant": "x" * MAX_DEFINITION_BYTES}), "x"), "65536"),
]


@pytest.mark.parametrize(("item", "value"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_runtime_schedule_is_refused_at_the_call_naming_the_value_and_writes_nothing(
    app: App, item: tuple[Any, Any, Any], value: str
) -> None:
    actor, schedule, name = item
    with pytest.raises(CronScheduleError) as info:  # a Schedule refuses a bad value when built
        app.cron.add(actor, schedule() if isinstance(schedule, partial) else schedule, name=name)
    assert value in str(info.value), str(info.value)
    assert app.redis.keys(f"{P}:runtime*") == []


def test_one_bad_item_in_a_bulk_add_writes_nothing_at_all(app: App) -> None:
    items: list[tuple[Any, Any, str]] = [("report", "0 * * * *", f"ok-{n}") for n in range(1200)]
    items.append(("report", "0 25 * * *", "bad-hour"))
    with pytest.raises(CronScheduleError, match="25"):
        app.store.add_many(items)
    assert app.redis.keys(f"{P}:runtime*") == []


def test_a_refused_write_script_leaves_nothing_written(app: App) -> None:
    app.cron.add("report", "0 * * * *", name="before")
    app.redis.set(IDS, "not a sorted set")  # the fifth key the script writes
    with pytest.raises(CronConfigurationError, match="WRONGTYPE"):
        app.store.add_many([("report", "0 * * * *", f"n{n}") for n in range(3)])
    with pytest.raises(CronConfigurationError, match="WRONGTYPE"):
        app.cron.remove("report", "before")
    assert app.redis.get(VERSION) == "1"
    assert app.redis.hkeys(RUNTIME) == ["report:before"] and app.redis.hkeys(REVS) == ["report:before"]
    assert app.redis.zrange(CHANGES, 0, -1) == ["report:before"]


def test_an_unreachable_redis_raises_one_clear_error_and_writes_nothing(redis_server: RedisServer) -> None:
    app = make_app(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(CronUnavailableError, match="did not answer") as info:
        app.cron.add("report", "0 * * * *", name="daily")
    assert isinstance(info.value, redis.ConnectionError)
    for call in (
        lambda: app.cron.remove("report", "daily"),
        lambda: app.cron.list(),
        app.store.version,
        app.store.load_all,
        lambda: app.store.changes_since(0),
    ):
        with pytest.raises(CronUnavailableError):
            call()


def test_an_actor_name_that_would_make_ids_ambiguous_is_refused(app: App) -> None:
    dramatiq.actor(lambda: None, actor_name="billing:eu", broker=app.broker)  # dramatiq allows it
    with pytest.raises(CronScheduleError, match="'billing:eu' must be non-empty, without ':' or '/'"):
        app.cron.add("billing:eu", "0 * * * *", name="x")


def test_runtime_schedules_need_the_broker_and_a_redis(redis_server: RedisServer) -> None:
    with pytest.raises(CronConfigurationError, match="broker"):
        CronMiddleware(redis=redis_server.url).add("report", "0 * * * *", name="x")


def test_defaults_are_resolved_when_written_so_every_process_reads_the_same_schedule(
    redis_server: RedisServer,
) -> None:
    berlin = make_app(redis_server.url, timezone="Europe/Berlin", catch_up="latest", catch_up_window=60_000)
    stored = berlin.cron.add("report", "0 9 * * *", name="daily")
    utc = make_app(redis_server.url)
    loaded = utc.store.load_all()[1]["report:daily"]
    assert loaded == stored.schedule
    assert (loaded.timezone, loaded.catch_up, loaded.catch_up_window) == ("Europe/Berlin", "latest", 60_000)


def test_load_all_then_changes_since_reaches_the_current_state_despite_writes_during_the_scan(app: App) -> None:
    """Given 20,000 schedules, When another client adds, replaces and removes
    schedules while a leader runs load_all, Then applying changes_since from
    the version load_all returned gives exactly what is stored at the end."""
    app.store.add_many([("report", "0 * * * *", f"t{n}") for n in range(20_000)])
    writer = make_app(app.cron.redis)
    scanning = threading.Event()
    done = threading.Event()
    writes = 0

    def churn() -> None:
        nonlocal writes
        scanning.wait(timeout=10)
        while not done.is_set() or writes < 200:
            n = writes
            if n % 3 == 0:
                writer.cron.remove("report", f"t{n * 7 % 20_000}")
            else:
                writer.cron.add("report", f"{n % 60} * * * *", name=f"t{n * 13 % 25_000}")
            writes += 1

    thread = threading.Thread(target=churn)
    thread.start()
    scan = app.store._scan

    def scan_while_writing() -> Iterator[tuple[str, str]]:
        scanning.set()
        yield from scan()

    app.store._scan = scan_while_writing  # type: ignore[method-assign]
    try:
        version, schedules = app.store.load_all()
    finally:
        done.set()
        thread.join(timeout=30)
        del app.store._scan
    assert writes >= 200
    new_version, changes = app.store.changes_since(version)
    for schedule_id, schedule in changes.items():
        if schedule is None:
            schedules.pop(schedule_id, None)
        else:
            schedules[schedule_id] = schedule
    assert new_version == app.store.version() > version
    assert schedules == app.store.load_all()[1]


def test_count_by_actor_counts_each_actors_range_of_ids(app: App) -> None:
    for name in ("a", "a0", "a!", "b"):
        dramatiq.actor(lambda: None, actor_name=name, broker=app.broker)
    for actor, count in (("a", 3), ("a0", 2), ("a!", 1), ("b", 4)):
        app.store.add_many([(actor, "0 * * * *", f"n{i}") for i in range(count)])
    assert app.store.count_by_actor() == {"a!": 1, "a": 3, "a0": 2, "b": 4}
    assert list(app.store.count_by_actor()) == ["a!", "a0", "a", "b"]  # the order of their ids ("a0:" < "a:")


VARIED = [
    Schedule("0 9 * * mon", timezone="Europe/Berlin", kwargs={"tenant": 1}),
    Schedule("H H * * *", args=([2, 3],), catch_up="latest", catch_up_window=60_000),
    Schedule(every=90_000, offset=1_000, start=1_000_000, end=NEVER - 1),
    Schedule("*/10 * * * * *", overlap="skip", overlap_ttl=5_000, jitter=2_000, max_age=30_000),
    Schedule("30 2 * * *", timezone="America/New_York", options={"max_retries": 0, "nested": {"a": [1]}}),
]


def test_loading_binds_each_definition_exactly_as_the_full_rule_book_would(app: App) -> None:
    """The load shares validation between schedules that differ only in
    name and arguments; every field, compared or not, must come out as
    binding each definition alone gives (zones, offsets and bounds vary
    between schedules of one template too)."""

    def varied(schedule: Schedule, k: int) -> Schedule:
        start = None if k == 0 else 1_000_000 + k
        end = None if k < 2 else 2_000_000_000_000 + k
        zone = (schedule.timezone, "Asia/Kolkata", "utc")[k]
        if schedule.every is not None:
            return dataclasses.replace(schedule, offset=1_000 * k, start=start, end=end, timezone=zone)
        return dataclasses.replace(schedule, start=start, end=end, timezone=zone)

    items = [("report", varied(schedule, k), f"v{n}-{k}") for n, schedule in enumerate(VARIED) for k in range(3)]
    app.store.add_many(items)
    _, loaded = app.store.load_all()
    assert len(loaded) == 3 * len(VARIED)
    for schedule_id, text in app.redis.hgetall(RUNTIME).items():
        data = json.loads(text)
        alone = bind_fully(data, data["rev"])
        fast = loaded[schedule_id]
        for field in dataclasses.fields(BoundSchedule):
            if field.init:  # the others are caches, filled on first use
                assert getattr(fast, field.name) == getattr(alone, field.name), (schedule_id, field.name)
        for field in dataclasses.fields(Cadence):  # those its equality leaves out too
            if not field.name.startswith("_"):
                assert getattr(fast.cadence, field.name) == getattr(alone.cadence, field.name), (
                    schedule_id,
                    field.name,
                )
        assert fast.id == alone.id == schedule_id
        assert fast.shape == alone.shape
        assert fast.expression == alone.expression  # an interval's label names its offset
        assert fast.next_after(1_800_000_000_000) == alone.next_after(1_800_000_000_000)
    # H fields hash the schedule's own identity, not the shared template's.
    h = [loaded[f"report:v1-{k}"] for k in range(3)]
    assert [s.cadence.hash_id for s in h] == ["report/v1-0", "report/v1-1", "report/v1-2"]
    assert loaded["report:v4-0"].options is not loaded["report:v4-1"].options  # never shared between schedules


def test_a_process_that_did_not_build_the_middleware_finds_it_on_the_broker(app: App) -> None:
    assert CronMiddleware.of(app.broker) is app.cron
    with pytest.raises(CronConfigurationError, match="has no CronMiddleware"):
        CronMiddleware.of(StubBroker())


def test_a_new_schedule_starts_in_the_ledger_at_its_creation(app: App) -> None:
    """``add`` writes a new schedule's baseline and shape with its
    definition, so a takeover finds every entry and only reads it."""
    ticks, shapes = f"{P}:ticks", f"{P}:shapes"
    before = int(app.redis.time()[0]) * 1000
    stored = app.cron.add("report", "0 9 * * *", name="x")
    tick, epoch, kind = app.redis.hget(ticks, stored.id).split(":")  # type: ignore[union-attr]
    assert (epoch, kind) == ("0", "baseline") and before <= int(tick) <= stored.created_ms
    assert app.redis.hget(shapes, stored.id) == stored.schedule.shape
    # Only the add itself is recorded (the audit trail), no rebase.
    assert [e[1]["outcome"] for e in app.redis.xrange(f"{P}:history") if e[1]["schedule"] == stored.id] == ["add"]
    # A ledger key of the wrong type is the leader's to repair: add still works.
    app.redis.delete(ticks)
    app.redis.set(ticks, "garbage")
    assert app.cron.add("report", "0 12 * * *", name="y").schedule.revision > stored.schedule.revision
    assert app.redis.get(ticks) == "garbage"


def test_a_replacement_keeps_its_entry_unless_its_ticks_change(app: App) -> None:
    """Given a schedule that has fired since its add, when it is replaced
    with the same ticks (other kwargs, queue or options), then its ledger
    entry stays (its catch-up survives any takeover); when it is replaced
    with other ticks, or removed and added again, then its entry moves to
    the write (nothing of the earlier definition fires, nothing of the new
    one after the write is lost), its shape is the new one, and the history
    says so once."""
    ticks, shapes, history = f"{P}:ticks", f"{P}:shapes", f"{P}:history"
    stored = app.cron.add("report", "0 9 * * *", name="x")
    fired = "1700000000000:7:1"
    app.redis.hset(ticks, stored.id, fired)  # as if fired since

    same = app.cron.add("report", Schedule("0 9 * * *", kwargs={"tenant": 2}, max_age=5000), name="x")
    assert app.redis.hget(ticks, stored.id) == fired
    assert app.redis.hget(shapes, stored.id) == same.schedule.shape == stored.schedule.shape

    def restarted_at(write: RuntimeSchedule) -> int:
        tick, epoch, kind = app.redis.hget(ticks, stored.id).split(":")  # type: ignore[union-attr]
        assert (int(tick), epoch, kind) == (write.updated_ms, "0", "baseline")
        assert app.redis.hget(shapes, stored.id) == write.schedule.shape
        return int(tick)

    other = app.cron.add("report", "0 10 * * *", name="x")
    assert other.schedule.shape != stored.schedule.shape
    restarted_at(other)
    assert app.cron.remove("report", "x")
    app.redis.hset(ticks, stored.id, fired)
    again = app.cron.add("report", "0 10 * * *", name="x")  # the same shape, but added again
    restarted_at(again)
    entries = [e[1] for e in app.redis.xrange(history) if e[1]["schedule"] == stored.id and "who" not in e[1]]
    assert [(e["outcome"], int(e["tick"])) for e in entries] == [
        ("rebased", other.updated_ms),
        ("rebased", again.updated_ms),
    ]
    assert "replaced" in entries[0]["detail"] and "added again" in entries[1]["detail"]

    # An entry ahead of the write (the server's clock stepped back) is kept:
    # a tick is never decided twice.
    ahead = f"{again.updated_ms + 3_600_000}:7:1"
    app.redis.hset(ticks, stored.id, ahead)
    app.cron.add("report", "0 11 * * *", name="x")
    assert app.redis.hget(ticks, stored.id) == ahead


def test_a_scan_that_fails_in_the_read_ahead_thread_raises_one_clear_error(app: App) -> None:
    """The definitions are scanned by a thread of their own (Redis reads
    the next page while the leader binds the current one); a failure there
    reaches the caller as the store's one clear error, and no thread stays."""
    app.store.add_many([("report", "0 * * * *", f"n{n}") for n in range(2500)])
    app.redis.delete(RUNTIME)
    app.redis.set(RUNTIME, "not a hash")
    with pytest.raises(CronConfigurationError, match="cannot load the runtime schedules: Redis refused"):
        app.store.load_all()
    assert not [t for t in threading.enumerate() if t.name == "dramatiq-cron-read-ahead"]
