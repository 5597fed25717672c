"""The run store contract (store/abc.py ``RunStore``): the same tests
against the in-memory store and the Redis scripts on a real redis-server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from dramatiq_cron_middleware.store.abc import RunStore
from dramatiq_cron_middleware.store.lease import Acquired
from dramatiq_cron_middleware.store.runs import HealthWrite
from tests.support.redis_server import RedisServer
from tests.support.stores import MemoryHarness, RedisHarness, StoreHarness

SID = "job/a"


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(params=["memory", "redis-resp2", "redis-resp3"])
def harness(request: pytest.FixtureRequest) -> Iterator[StoreHarness]:
    made: StoreHarness = (
        MemoryHarness()
        if request.param == "memory"
        else RedisHarness(request.getfixturevalue("shared_redis"), protocol=int(request.param[-1]))
    )
    yield made
    made.close()


def start(runs: RunStore, tick: int, *, token: str = "d1", attempt: int = 1) -> bool:
    return runs.record_run("start", SID, tick, attempt=attempt, token=token, host="h", pid=7)


def finish(runs: RunStore, tick: int, outcome: str, *, token: str = "d1", attempt: int = 1, error: str = "") -> bool:
    return runs.record_run(
        "finish", SID, tick, attempt=attempt, token=token, host="h", pid=7, outcome=outcome, error=error
    )


def write(**fields: object) -> HealthWrite:
    base: dict[str, object] = {"cursor": None, "facts": {}, "add": {}, "remove": [], "runs": [], "alerts": []}
    base.update(fields)
    return HealthWrite(**base)  # type: ignore[arg-type]


def test_a_run_is_recorded_at_start_and_finish_and_read_as_events_after_the_cursor(harness: StoreHarness) -> None:
    runs = harness.run_store()
    store = harness.candidate("a")
    acquired = store.lease.acquire()
    assert isinstance(acquired, Acquired) and store.lease.token is not None

    assert start(runs, 1000)
    assert finish(runs, 1000, "failed", error="ValueError: no")
    [run] = harness.runs(SID)
    assert (run.tick_ms, run.outcome, run.attempt, run.host, run.pid, run.error) == (
        1000,
        "failed",
        1,
        "h",
        7,
        "ValueError: no",
    )
    assert run.duration_ms is not None and run.duration_ms >= 0

    read = runs.read_health(max_events=10, max_due=10)
    assert [(e.kind, e.schedule_id, e.tick_ms, e.outcome) for e in read.events] == [
        ("start", SID, 1000, "running"),
        ("finish", SID, 1000, "failed"),
    ]
    assert read.events[1].error == "ValueError: no"
    assert runs.write_health(store.lease.token, write(cursor=read.events[-1].entry_id))
    assert runs.read_health(max_events=10, max_due=10).events == []


def test_a_duplicate_start_is_refused_and_a_newer_attempt_wins(harness: StoreHarness) -> None:
    runs = harness.run_store()
    assert start(runs, 1000, token="d1")
    assert not start(runs, 1000, token="d2")  # another delivery of attempt 1
    assert not finish(runs, 1000, "dropped", token="d2")  # its skip leaves the run alone
    assert harness.runs(SID)[0].outcome == "running"
    assert finish(runs, 1000, "retrying", token="d1")
    assert start(runs, 1000, token="d3", attempt=2)
    assert not finish(runs, 1000, "failed", token="d1", attempt=1)  # a stale finish
    assert finish(runs, 1000, "succeeded", token="d3", attempt=2)
    [run] = harness.runs(SID)
    assert (run.outcome, run.attempt) == ("succeeded", 2)


def test_only_the_newest_run_history_runs_are_kept(harness: StoreHarness) -> None:
    runs = harness.run_store(run_history=3)
    for tick in (1000, 2000, 3000, 4000, 5000):
        assert start(runs, tick, token=str(tick))
    assert [r.tick_ms for r in harness.runs(SID)] == [5000, 4000, 3000]


def test_health_writes_are_fenced_by_the_lease_token(harness: StoreHarness) -> None:
    runs = harness.run_store()
    store = harness.candidate("a")
    assert isinstance(store.lease.acquire(), Acquired)
    facts = json.dumps({"health": "failing"})
    assert not runs.write_health("someone-else", write(facts={SID: facts}, alerts=["x"]))
    assert runs.alerts(10, outbox="on_alert") == []
    assert runs.read_health(max_events=10, max_due=10, schedule_ids=[SID]).facts == {}

    token = store.lease.token
    assert token is not None
    now = harness.now_ms()
    assert runs.write_health(
        token,
        write(
            facts={SID: facts},
            alerts=["a1", "a2"],
            outboxes=("on_alert",),
            add={f"p|1|{SID}": now - 1, f"r|2|{SID}": now + 60_000},
        ),
    )
    read = runs.read_health(max_events=10, max_due=10, schedule_ids=[SID])
    assert read.facts == {SID: facts}
    assert read.due == [(f"p|1|{SID}", now - 1)]
    assert runs.alerts(10, outbox="on_alert") == ["a1", "a2"]
    runs.alert_delivered("a1", outbox="on_alert")
    assert runs.alerts(10, outbox="on_alert") == ["a2"]


def test_the_leader_marks_fired_ticks_pending_and_overdue_runs_lost(harness: StoreHarness) -> None:
    runs = harness.run_store()
    store = harness.candidate("a")
    assert isinstance(store.lease.acquire(), Acquired)
    token = store.lease.token
    assert token is not None
    assert start(runs, 2000)
    assert finish(runs, 2000, "succeeded")
    assert start(runs, 3000, token="d3")
    marks = [(SID, 1000, "pending"), (SID, 2000, "pending"), (SID, 3000, "lost"), (SID, 2000, "lost")]
    assert runs.write_health(token, write(runs=marks))
    assert [(r.tick_ms, r.outcome) for r in harness.runs(SID)] == [
        (3000, "lost"),
        (2000, "succeeded"),
        (1000, "pending"),
    ]
    assert finish(runs, 3000, "succeeded", token="d3")  # a slow run that was only late to finish
    assert harness.runs(SID)[0].outcome == "succeeded"


def test_each_alert_goes_to_the_outboxes_named_and_each_drains_alone(harness: StoreHarness) -> None:
    runs = harness.run_store()
    store = harness.candidate("a")
    assert isinstance(store.lease.acquire(), Acquired)
    token = store.lease.token
    assert token is not None
    assert runs.write_health(token, write(alerts=["a1"], outboxes=("on_alert", "webhook")))
    assert runs.write_health(token, write(alerts=["a2"], outboxes=("webhook",)))
    assert runs.alerts(10, outbox="on_alert") == ["a1"]
    assert runs.alerts(10, outbox="webhook") == ["a1", "a2"]
    runs.alert_delivered("a1", outbox="on_alert")
    assert runs.alerts(10, outbox="on_alert") == [] and runs.alerts(10, outbox="webhook") == ["a1", "a2"]


def test_a_started_run_is_alive_until_its_heartbeat_lapses_or_it_finishes(harness: StoreHarness) -> None:
    """The leader reads, for a run past its deadline, whether a live worker
    still runs it (a heartbeat within ALIVE_MS): then it is running long,
    not lost."""
    runs = harness.run_store()
    store = harness.candidate("a")
    assert isinstance(store.lease.acquire(), Acquired)
    token = store.lease.token
    assert token is not None
    member = f"r|1000|{SID}"
    assert start(runs, 1000)
    now = harness.now_ms()
    assert runs.write_health(token, write(add={member: now - 1, f"r|2000|{SID}": now - 1}))
    read = runs.read_health(max_events=10, max_due=10)
    assert set(read.alive) == {member} and read.alive[member] > read.now_ms  # 2000 never started here
    runs.keep_alive([member])
    assert runs.read_health(max_events=10, max_due=10).alive[member] >= read.alive[member]
    assert finish(runs, 1000, "succeeded")
    assert runs.read_health(max_events=10, max_due=10).alive == {}


def test_a_retried_record_whose_reply_was_lost_is_recorded_once(harness: StoreHarness) -> None:
    """A start or finish retried after a timeout (the script ran, its reply
    was lost) appends no second event: a failure is counted once."""
    runs = harness.run_store()
    assert start(runs, 1000) and start(runs, 1000)
    assert finish(runs, 1000, "failed", error="E") and finish(runs, 1000, "failed", error="E")
    events = runs.read_health(max_events=10, max_due=10).events
    assert [(e.kind, e.outcome) for e in events] == [("start", "running"), ("finish", "failed")]
