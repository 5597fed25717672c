"""The operator half's contract (store/abc.py ``OperatorStore``): the same
tests against the in-memory store and the Redis one on a real
redis-server: pauses with their end, audit entries, the history's reads,
the ledger's decisions, who leads, run records and backfill claims."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.errors import CronScheduleError
from dramatiq_cron_middleware.monitoring.records import parse_run
from dramatiq_cron_middleware.store.lease import Acquired
from dramatiq_cron_middleware.store.memory.operator import MemoryOperator
from dramatiq_cron_middleware.store.operator import ForeignLock, RedisOperator
from tests.support.redis_server import RedisServer
from tests.support.stores import MemoryHarness, RedisHarness, StoreHarness

SID = "job/a"


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
def harness(request: pytest.FixtureRequest) -> Iterator[StoreHarness]:
    made: StoreHarness = (
        MemoryHarness() if request.param == "memory" else RedisHarness(request.getfixturevalue("shared_redis"))
    )
    yield made
    made.close()


def test_a_pause_changes_once_per_end_and_lapses_at_its_end(harness: StoreHarness) -> None:
    store = harness.operator()
    end = store.server_ms() + 60_000
    assert store.set_pause(SID, None)
    assert not store.set_pause(SID, None)  # already so
    assert store.set_pause(SID, end)  # a new end is a change
    assert not store.set_pause(SID, end)
    assert store.pauses() == {SID: end} and store.paused() == {SID}
    assert store.set_pause("job:*", store.server_ms() + 50)
    harness.pass_time(100)
    assert store.pauses() == {SID: end}  # the lapsed one is gone, whoever removes it
    assert store.clear_pause(SID) and not store.clear_pause(SID)
    assert store.paused() == set()


def test_audit_entries_carry_the_store_time_the_epoch_and_who(harness: StoreHarness) -> None:
    store = harness.operator()
    leader = harness.candidate("a")
    acquired = leader.lease.acquire()
    assert isinstance(acquired, Acquired)
    before = store.server_ms()
    at = store.record("pause", who="alice", entries=[(SID, "until x"), ("job:*", "")])
    store.record("triggered", who="cli", entries=[("job", "manual")], tick_ms=1234, message_id="m1")
    assert at >= before
    newest, *older = store.history(limit=10)
    assert (newest.schedule_id, newest.outcome, newest.tick_ms, newest.who) == ("job", "triggered", 1234, "cli")
    assert (newest.message_id, newest.epoch) == ("m1", acquired.epoch)
    assert [(e.schedule_id, e.detail, e.who, e.at_ms, e.tick_ms) for e in older] == [
        ("job:*", "", "alice", at, at),
        (SID, "until x", "alice", at, at),
    ]
    assert [e.schedule_id for e in store.history(limit=10, match={"job"})] == ["job", "job:*", SID]
    assert [e.schedule_id for e in store.history(limit=10, match={SID})] == [SID]
    assert [e.schedule_id for e in store.history(limit=1)] == ["job"]
    assert [e.schedule_id for e in store.history_since(at)] == [SID, "job:*", "job"]


def test_one_schedules_history_pages_back_with_a_cursor(harness: StoreHarness) -> None:
    store = harness.operator()
    for tick in range(5):
        store.record("triggered", who="t", entries=[(SID, ""), ("other", "")], tick_ms=tick)
    first = store.schedule_history(SID, limit=2)
    assert [e.tick_ms for e in first.entries] == [4, 3] and first.older is not None
    second = store.schedule_history(SID, limit=2, before=first.older)
    assert [e.tick_ms for e in second.entries] == [2, 1]
    assert second.older is not None
    last = store.schedule_history(SID, limit=2, before=second.older)
    assert [e.tick_ms for e in last.entries] == [0] and last.older is None


def test_decisions_read_the_ledger_and_skip_what_does_not_parse(harness: StoreHarness) -> None:
    store = harness.operator()
    harness.set_ledger_value(SID, "1000:3")
    harness.set_ledger_value("base", "2000:0:baseline")
    harness.set_ledger_value("bad", "not a value")
    decided = store.decisions([SID, "base", "bad", "missing"])
    assert {sid: (d.tick_ms, d.epoch, d.outcome) for sid, d in decided.items()} == {
        SID: (1000, 3, "unknown"),
        "base": (2000, 0, "baseline"),
    }
    store.record("caught_up", who="", entries=[(SID, "")], tick_ms=1000)
    assert store.last_decisions()[SID].outcome == "caught_up"  # the history says more
    assert store.ledger_value(SID) == "1000:3"


def test_who_leads_and_who_competes_are_read_back(harness: StoreHarness) -> None:
    store = harness.operator()
    assert store.leader() is None
    since = store.server_ms()
    leader = harness.candidate("host-a", fingerprint="fp", version="v1")
    acquired = leader.lease.acquire()
    assert isinstance(acquired, Acquired)
    info = store.leader()
    assert info is not None and (info.host, info.epoch) == ("host-a", acquired.epoch)
    assert 0 < info.remaining_ms <= info.ttl_ms
    [seen] = store.candidates(since_ms=since)
    assert (seen.host, seen.candidate_id, seen.fingerprint, seen.version) == (
        "host-a",
        leader.lease.candidate_id,
        "fp",
        "v1",
    )


def test_run_records_are_read_newest_first(harness: StoreHarness) -> None:
    runs, store = harness.run_store(), harness.operator()
    for tick in (1000, 2000, 3000):
        assert runs.record_run("start", SID, tick, attempt=1, token=str(tick), host="h", pid=1)
    records = [parse_run(SID, text) for text in store.run_records(SID, limit=2)]
    assert [r.tick_ms for r in records if r is not None] == [3000, 2000]


def test_a_backfill_tick_is_claimed_by_one_run_and_only_up_to_the_ledger(harness: StoreHarness) -> None:
    store = harness.operator()
    now = store.server_ms()
    harness.set_ledger_value(SID, f"{now - 10_000}:1")
    ticks = [now - 30_000, now - 20_000, now - 5_000]
    ok, at, results = store.claim_backfill(SID, bound_ms=None, revision=0, ticks=ticks, token="run1")
    assert ok and at >= now and results == [1, 1, 2]  # after the ledger's tick: the leader's
    assert store.claim_backfill(SID, bound_ms=None, revision=0, ticks=ticks[:2], token="run2")[2] == [0, 0]
    assert store.claim_backfill(SID, bound_ms=None, revision=0, ticks=ticks[:1], token="run1")[2] == [1]
    assert store.claim_backfill(SID, bound_ms=now - 25_000, revision=0, ticks=ticks[1:2], token="x")[2] == [2]
    store.settle_backfill(SID, token="run1", sent=[(ticks[0], "m0")], unsent=[ticks[1]])
    assert store.backfill_marks(SID, ticks) == {ticks[0]: "e"}
    [entry] = [e for e in store.history(limit=10) if e.outcome == "backfilled"]
    assert (entry.schedule_id, entry.tick_ms, entry.message_id) == (SID, ticks[0], "m0")
    # released: another run claims it now; the enqueued one stays taken
    assert store.claim_backfill(SID, bound_ms=None, revision=0, ticks=ticks[:2], token="run2")[2] == [0, 1]
    # a settle of someone else's claim changes nothing
    store.settle_backfill(SID, token="run1", sent=[(ticks[1], "m1")], unsent=[])
    assert store.backfill_marks(SID, ticks[1:2]) == {ticks[1]: "c|run2"}


def test_a_backfill_of_a_replaced_runtime_schedule_is_refused_whole(harness: StoreHarness) -> None:
    store = harness.operator()
    stored = harness.add_runtime("job", "* * * * *", "r")
    ok, _, _ = store.claim_backfill(stored.id, bound_ms=None, revision=stored.revision, ticks=[1], token="a")
    assert ok
    harness.add_runtime("job", "*/2 * * * *", "r")
    ok, _, results = store.claim_backfill(stored.id, bound_ms=None, revision=stored.revision, ticks=[1], token="a")
    assert not ok and results == []


def test_a_bad_listing_argument_is_refused_by_name_on_every_store(harness: StoreHarness) -> None:
    # Given a stored schedule, when a listing names a bad limit, search,
    # cursor or actor, then each store refuses it with the same error.
    store = harness.definitions()
    store.add("job", "0 9 * * *", name="r")
    for kwargs, named in [
        ({"limit": 0}, "limit"),
        ({"search": 5}, "search"),
        ({"cursor": 5}, "cursor"),
        ({"actor": 5}, "actor"),
    ]:
        with pytest.raises(CronScheduleError, match=named):
            store.list(**kwargs)  # type: ignore[arg-type]
    assert [r.id for r in store.list(actor="job").items] == ["job:r"]


def test_runtime_definitions_are_written_whole_updated_in_part_and_removed(harness: StoreHarness) -> None:
    store = harness.definitions()
    [first] = store.add_many([("job", Schedule("0 9 * * *", kwargs={"t": 1}, description="d"), "r")])
    assert (first.id, first.revision) == ("job:r", 1)
    with pytest.raises(CronScheduleError, match="already"):
        store.add_many([("job", "0 10 * * *", "r")], replace=False)
    before, after = store.update("job:r", {"expression": "0 10 * * *"})
    assert before.schedule.expression == "0 9 * * *" and after.revision == 2
    assert (after.schedule.expression, after.schedule.kwargs, after.schedule.description) == (
        "0 10 * * *",
        {"t": 1},
        "d",
    )
    got = store.get("job", "r")
    assert got is not None and got.schedule == after.schedule
    store.add_many([("job", "0 9 * * *", n) for n in ("a", "b", "c")] + [("other", "0 9 * * *", "z")])
    page = store.list(actor="job", limit=2)
    assert [r.name for r in page.items] == ["a", "b"] and page.total == 4 and page.cursor == "job:b"
    assert [r.name for r in store.list(actor="job", cursor=page.cursor).items] == ["c", "r"]
    assert [r.id for r in store.list(search="Z").items] == ["other:z"]
    assert store.count_by_actor() == {"job": 4, "other": 1}
    assert store.remove("job", "r") and not store.remove("job", "r")
    assert store.get("job", "r") is None


def test_another_schedulers_lock_is_read_and_deleted_only_by_its_holders_token(harness: StoreHarness) -> None:
    # dramatiq-crontab's lock after a migration (service.Cron.crontab_lock).
    store = harness.operator()
    key = "dramatiq-scheduler"

    def plant(holder: str, ttl_ms: int | None) -> None:
        if isinstance(store, MemoryOperator):
            store.foreign[key] = (holder, None if ttl_ms is None else store.server_ms() + ttl_ms)
        else:
            assert isinstance(store, RedisOperator)
            store.client.set(key, holder, px=ttl_ms)

    assert store.foreign_lock(key) == ForeignLock(None, -2)
    plant("t1", 10_000)
    found = store.foreign_lock(key, delete_if="other")
    assert (found.holder, found.deleted) == ("t1", False) and 0 < found.pttl_ms <= 10_000
    assert store.foreign_lock(key, delete_if="t1").deleted
    assert store.foreign_lock(key) == ForeignLock(None, -2)
    plant("t2", None)
    assert store.foreign_lock(key) == ForeignLock("t2", -1)
    plant("t3", 50)
    harness.pass_time(100)
    assert store.foreign_lock(key, delete_if="t3") == ForeignLock(None, -2)


def test_a_survey_reads_every_stored_schedule_once_in_id_order(harness: StoreHarness) -> None:
    store = harness.definitions()
    assert store.survey() == ([], [])
    store.add_many([("job", "0 9 * * *", n) for n in ("b", "a", "c")] + [("other", "H * * * *", "z")])
    store.remove("job", "c")
    schedules, problems = store.survey()
    listed = [r.schedule for r in store.list(limit=10).items]
    assert [s.id for s in schedules] == ["job:a", "job:b", "other:z"] and problems == []
    assert schedules == listed  # bound as the listing binds them
    assert store.recheck() == []
