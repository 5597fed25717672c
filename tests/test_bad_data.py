"""Bad values in Redis are treated as missing, with one WARNING naming the
key, and never stop the other schedules; a malformed request writes
nothing."""

from __future__ import annotations

import json

import dramatiq
import pytest

from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import ClaimResult, Corrupt, parse_ledger_value
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Acquired, Lease
from dramatiq_cron_middleware.store.ledger import BadRequest, Claim, Ledger
from tests.support.inprocess import InProcessApp, in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

CRONS = {"poisoned": "* * * * * *", "healthy": "* * * * * *"}


def fires_again(app: InProcessApp, actor: str, count: int = 2) -> None:
    mark = len(app.sent(actor))
    wait_for(lambda: len(app.sent(actor)) >= mark + count, timeout=60, what=f"{actor} to fire {count} more ticks")


BAD_VALUES = ["1800000000000", "garbage", "1_800_000_000_000:1:1", "1e12:1:1"]


@pytest.mark.slow
def test_an_operator_reset_with_a_bad_ledger_value_stops_nothing(redis_server: RedisServer) -> None:
    """Given two schedules firing, when an operator writes a value that does
    not follow the ledger grammar into one schedule's entry (the review's
    ``HSET {p}:ticks <id> <ms>`` halted every schedule with an IndexError),
    then the other schedule keeps firing, the poisoned one resumes, one
    WARNING names the entry, and no tick fires twice; for every kind of bad
    value in turn."""
    with in_process_app(redis_server.url, CRONS) as app:
        fires_again(app, "healthy", 1)
        poisoned = next(s for s in app.middleware.all_schedules() if s.actor_name == "poisoned")
        for value in BAD_VALUES:
            redis_server.client().hset(app.keys.ticks, poisoned.id, value)
            app.leader.queue.invalidate()  # the next turn reads the ledger again
            fires_again(app, "poisoned", 1)
            fires_again(app, "healthy", 1)
            assert parse_ledger_value(redis_server.client().hget(app.keys.ticks, poisoned.id)) is not None
        # One WARNING for the entry, not one per loop or per value.
        assert len(app.warnings("unparsable")) == 1, app.warnings()
        assert app.duplicates() == []


@pytest.mark.parametrize(
    "keys", [("epoch", "paused", "history", "candidates"), ("lease",)], ids=["epoch-paused-history-candidates", "lease"]
)
def test_a_scheduler_key_of_the_wrong_type_is_treated_as_missing(
    redis_server: RedisServer, keys: tuple[str, ...]
) -> None:
    """Given scheduler keys overwritten with the wrong type or a non-number
    (a stray SET, a bad restore), when the leader next touches them (here
    after a leadership change), then it reports each key once, repairs it,
    and every schedule keeps firing."""
    with in_process_app(redis_server.url, CRONS) as app:
        fires_again(app, "healthy", 1)
        client = redis_server.client()
        for key in keys:
            name = getattr(app.keys, key)
            client.delete(name)
            client.set(name, "not-a-number" if key == "epoch" else "wrong type")
        if "lease" not in keys:
            client.delete(app.keys.lease)
        fires_again(app, "healthy", 2)
        fires_again(app, "poisoned", 1)
        for key in keys:
            assert len(app.warnings(getattr(app.keys, key))) == 1, app.warnings()
        assert app.duplicates() == []


def lead(redis_server: RedisServer) -> tuple[Lease, Ledger, int]:
    client, blocking = scheduler_clients(redis_server.url, op_timeout_ms=500, block_timeout_ms=2000)
    keys = Keys("t")
    clock = ServerClock()
    lease = Lease(client=client, blocking_client=blocking, keys=keys, ttl_ms=5000, clock=clock)
    ledger = Ledger(client=client, keys=keys, clock=clock)
    acquired = lease.acquire()
    assert isinstance(acquired, Acquired) and lease.token
    return lease, ledger, acquired.epoch


def test_a_malformed_claim_batch_writes_nothing(redis_server: RedisServer) -> None:
    """Given a batch whose last entry the script cannot accept, when it is
    claimed, then the script refuses the whole batch before writing: no
    ledger entry, no history, no batch record.  (The old script recorded the
    earlier entries as fired and then failed: a tick recorded but never
    enqueued.)"""
    lease, ledger, epoch = lead(redis_server)
    assert lease.token
    base = ledger.sync(lease.token, epoch, ["a", "b"], now_ms=0).ticks["a"]
    good = Claim(schedule_id="a", tick_ms=base + 1000, outcome="fired", fire=True, actor_name="a", message_id="m1")
    bad = Claim(schedule_id="b", tick_ms=base + 1000, outcome="fired", fire=True, actor_name="b", message_id="m2")
    client = redis_server.client()
    before = client.hgetall(Keys("t").ticks)
    original = ledger._claim

    def corrupting(*, keys: list[str], args: list[object]) -> object:
        entries = json.loads(str(args[5]))
        entries[-1][1] = "not a number"
        return original(keys=keys, args=[*args[:5], json.dumps(entries)])

    ledger._claim = corrupting  # type: ignore[assignment]
    with pytest.raises(BadRequest):
        ledger.claim(lease.token, epoch, "batch-x", [good, bad])
    assert client.hgetall(Keys("t").ticks) == before
    assert client.xlen(Keys("t").history) == 0
    assert not client.exists(Keys("t").batch("batch-x"))


def test_a_claim_against_an_unparsable_entry_is_lost_not_half_written(redis_server: RedisServer) -> None:
    lease, ledger, epoch = lead(redis_server)
    assert lease.token
    base = ledger.sync(lease.token, epoch, ["a", "b"], now_ms=0).ticks["a"]
    redis_server.client().hset(Keys("t").ticks, "b", "12:x")
    claims = [
        Claim(schedule_id=sid, tick_ms=base + 1000, outcome="fired", fire=True, actor_name=sid, message_id=sid)
        for sid in ("a", "b")
    ]
    assert ledger.claim(lease.token, epoch, "b1", claims).results == [ClaimResult.FIRE, ClaimResult.LOST]
    assert redis_server.client().hget(Keys("t").ticks, "b") == "12:x"


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("1800000000000:3:1", (1800000000000, 3, 1, False)),
        ("1800000000000:3:baseline", (1800000000000, 3, None, True)),
        ("1800000000000:3", (1800000000000, 3, None, False)),
        ("-5:1:-1", (-5, 1, -1, False)),
        ("1800000000000", None),
        (" 1800000000000:3:1", None),
        ("1_800:3:1", None),
        ("18000000000000000:3:1", None),
    ],
)
def test_one_ledger_grammar(value: str, parsed: tuple[int, int, int | None, bool] | None) -> None:
    got = parse_ledger_value(value)
    assert (None if got is None else (got.tick_ms, got.epoch, got.result, got.baseline)) == parsed


def test_an_unusable_batch_record_is_reported_and_the_results_are_read_back(redis_server: RedisServer) -> None:
    """Given a claim that ran but whose reply was lost, and whose result
    record was overwritten with garbage before the leader settled it, when
    the leader settles, then the results come back from the ledger (what
    this epoch was granted), the record is reported, and it is voided."""
    lease, ledger, epoch = lead(redis_server)
    assert lease.token
    base = ledger.sync(lease.token, epoch, ["a", "b"], now_ms=0).ticks["a"]
    claims = [
        Claim(schedule_id="a", tick_ms=base + 1000, outcome="fired", fire=True, actor_name="a", message_id="m1"),
        Claim(schedule_id="b", tick_ms=base + 1000, outcome="missed", fire=False, actor_name="b"),
    ]
    assert ledger.claim(lease.token, epoch, "lost", claims).results == [ClaimResult.FIRE, ClaimResult.RECORDED]
    redis_server.client().set(Keys("t").batch("lost"), "garbage!")
    settled = ledger.settle("lost", epoch=epoch, claims=claims)
    assert settled.results == [ClaimResult.FIRE, ClaimResult.RECORDED]
    assert settled.record_corrupt
    assert redis_server.client().get(Keys("t").batch("lost")) == "void"


def test_a_runtime_revisions_key_of_the_wrong_type_is_reported(redis_server: RedisServer) -> None:
    """Given the runtime revisions hash overwritten with a string, when a
    runtime schedule's tick is claimed, then it is not fired (its definition
    cannot be proven current) and the reply flags the key, so the leader
    names it in one WARNING instead of dropping every runtime tick in
    silence."""
    lease, ledger, epoch = lead(redis_server)
    assert lease.token
    redis_server.client().set(Keys("t").runtime_revs, "garbage")
    base = ledger.sync(lease.token, epoch, ["report:r1"], now_ms=0).ticks["report:r1"]
    claim = Claim(
        schedule_id="report:r1", tick_ms=base + 1000, outcome="fired", fire=True, actor_name="report", revision=1
    )
    reply = ledger.claim(lease.token, epoch, "b1", [claim])
    assert reply.results == [ClaimResult.GONE]
    assert reply.corrupt & Corrupt.RUNTIME_REVS


def test_the_leader_names_a_runtime_revisions_key_of_the_wrong_type_once(redis_server: RedisServer) -> None:
    """Given a leader firing a declared and a runtime schedule, when the
    runtime revisions hash is overwritten with a string, then the runtime
    schedule stops firing (its definition cannot be proven current), one
    WARNING names the key, and the declared schedule keeps firing."""
    with in_process_app(redis_server.url, {"healthy": "* * * * * *"}, start=False) as app:
        dramatiq.actor(lambda: None, actor_name="tenant", broker=app.broker)
        app.middleware.start(app.broker)
        app.middleware.add("tenant", "* * * * * *", name="acme")
        fires_again(app, "tenant", 1)
        redis_server.client().set(app.keys.runtime_revs, "garbage")
        fires_again(app, "healthy", 3)
        assert len(app.warnings(app.keys.runtime_revs)) == 1, app.warnings()
        assert app.duplicates() == []
