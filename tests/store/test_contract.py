"""The store contract: the same tests against the in-memory store (on a fake
clock) and the Redis store (today's Lua scripts on a real redis-server).
Where they differ, the memory store is wrong: Redis is the reference."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.errors import CronScheduleError
from dramatiq_cron_middleware.store.abc import Store
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.codes import ClaimResult, Corrupt, Outcome, SyncCode, whole_actor
from dramatiq_cron_middleware.store.durability import Unconfirmed
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryServer
from dramatiq_cron_middleware.store.lease import Acquired, Held
from dramatiq_cron_middleware.store.ledger import Claim, NotLeader, SyncEntry
from tests.support.redis_server import RedisServer
from tests.support.stores import MemoryHarness, RedisHarness, StoreHarness

FIRE, REFUSED, RECORDED = ClaimResult.FIRE, ClaimResult.REFUSED, ClaimResult.RECORDED
SKIPPED, PAUSED, NOT_YET = ClaimResult.SKIPPED, ClaimResult.PAUSED, ClaimResult.NOT_YET
GONE, LOST = ClaimResult.GONE, ClaimResult.LOST
SID = "job/a"


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


# Redis on both protocols: redis-py 8 speaks RESP3 unless told otherwise,
# redis-py 5 RESP2, and a user's client may pick either.
@pytest.fixture(params=["memory", "redis-resp2", "redis-resp3"])
def harness(request: pytest.FixtureRequest) -> Iterator[StoreHarness]:
    made: StoreHarness
    if request.param == "memory":
        made = MemoryHarness()
    else:
        made = RedisHarness(request.getfixturevalue("shared_redis"), protocol=int(request.param[-1]))
    yield made
    made.close()


T = TypeVar("T")


def confirmed(call: Callable[[], T]) -> T:
    """``call()``, again while too few replicas acknowledged it, as the
    leader retries at its next turn (a loaded machine may let a fresh
    replica's acknowledgement miss one wait); at most for 60 s.  Every call
    so retried is idempotent: an acquisition retries its token, a claim or
    a settle its batch."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except Unconfirmed:
            assert time.monotonic() < deadline, "no replica acknowledged within 60 s"


def lead(store: Store) -> tuple[str, int]:
    acquired = confirmed(store.lease.acquire)
    assert isinstance(acquired, Acquired), acquired
    assert store.lease.token is not None
    return store.lease.token, acquired.epoch


def synced(harness: StoreHarness, store: Store, *ids: str) -> tuple[str, int, int]:
    """Lead and sync ``ids`` with a baseline ten minutes back; returns the
    token, the epoch and the baseline."""
    token, epoch = lead(store)
    base = harness.now_ms() - 600_000
    reply = store.ledger.sync(token, epoch, list(ids), now_ms=base)
    assert all(reply.ticks[sid] == base for sid in ids)
    return token, epoch, base


def fire(tick: int, sid: str = SID, **options: object) -> Claim:
    return Claim(
        schedule_id=sid,
        tick_ms=tick,
        outcome="fired",
        fire=True,
        actor_name=sid.split("/")[0].split(":")[0],
        message_id=f"m-{sid}-{tick}",
        **options,  # type: ignore[arg-type]
    )


def missed(tick: int, sid: str = SID) -> Claim:
    return Claim(schedule_id=sid, tick_ms=tick, outcome="missed", fire=False, detail="caught up later")


# -- the lease ----------------------------------------------------------------


def test_a_free_lease_is_acquired_once_and_the_others_see_its_holder(harness: StoreHarness) -> None:
    a, b = harness.candidate("a"), harness.candidate("b")
    acquired = a.lease.acquire()
    held = b.lease.acquire()
    assert isinstance(acquired, Acquired) and acquired.epoch == 1 and acquired.epoch_was_missing
    assert isinstance(held, Held) and b.lease.token is None
    assert held.token == a.lease.token and held.renewals == "1"
    assert 0 < held.remaining_ms <= 2000
    assert a.clock.synced and abs(acquired.server_ms - harness.now_ms()) < 1000


def test_the_holder_acquiring_again_keeps_its_epoch(harness: StoreHarness) -> None:
    """A retry after a lost acquire reply finds the lease its own."""
    a = harness.candidate("a")
    _, epoch = lead(a)
    again = a.lease.acquire()
    assert isinstance(again, Acquired) and again.epoch == epoch


def test_a_renewal_extends_the_lease_to_a_whole_ttl_from_now(harness: StoreHarness) -> None:
    # Each step leaves the lease 1.8 s to spare (a loaded machine's stall
    # between two calls to Redis must not expire it), and both together
    # pass the first TTL.
    a, b = harness.candidate("a", ttl_ms=4000), harness.candidate("b", ttl_ms=4000)
    lead(a)
    harness.pass_time(2200)
    assert a.lease.renew() is not None
    harness.pass_time(2200)  # past the first TTL: held only thanks to the renewal
    held = b.lease.acquire()
    assert isinstance(held, Held) and held.renewals == "2" and 0 < held.remaining_ms <= 4000


def test_an_expired_lease_goes_to_the_next_candidate_with_the_next_epoch(harness: StoreHarness) -> None:
    a, b = harness.candidate("a", ttl_ms=200), harness.candidate("b", ttl_ms=200)
    _, epoch = lead(a)
    harness.pass_time(250)
    taken = b.lease.acquire()
    assert isinstance(taken, Acquired) and taken.epoch == epoch + 1 and not taken.epoch_was_missing
    assert a.lease.renew() is None and a.lease.token is None


def test_release_is_compare_and_delete_and_wakes_a_follower(harness: StoreHarness) -> None:
    a, b = harness.candidate("a"), harness.candidate("b")
    _, epoch = lead(a)
    assert isinstance(b.lease.acquire(), Held)
    assert b.lease.release() is False  # not b's (and b is no candidate any more)
    assert isinstance(b.lease.acquire(), Held)
    assert isinstance(harness.candidate("c").lease.acquire(), Held)
    assert a.lease.release() is True and a.lease.token is None
    # One wake-up per candidate seen within two leases (b and c).
    assert b.lease.wait_for_release(2000) is True
    assert harness.candidate("d").lease.wait_for_release(2000) is True
    assert b.lease.wait_for_release(50) is False
    taken = b.lease.acquire()
    assert isinstance(taken, Acquired) and taken.epoch == epoch + 1


def test_a_wait_returns_when_the_candidate_wakes_itself(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    a.lease.wake_self()
    assert a.lease.wait_for_release(2000) is True


def test_depose_deletes_the_lease_only_if_the_field_still_reads_what_was_seen(harness: StoreHarness) -> None:
    a, b = harness.candidate("a"), harness.candidate("b")
    lead(a)
    held = b.lease.acquire()
    assert isinstance(held, Held)
    assert a.lease.renew()  # the renewal count moved on
    assert b.lease.depose(held.token, "seq", held.renewals) is False
    assert b.lease.depose("another", "seq", "2") is False
    assert b.lease.depose(held.token, "seq", "2") is True
    assert a.lease.renew() is None
    assert isinstance(b.lease.acquire(), Acquired)


def test_a_lost_epoch_counter_restarts_above_every_epoch_the_ledger_names(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    harness.set_ledger_value(SID, "1000:41:1")
    _, epoch = lead(a)
    assert epoch == 42
    a.lease.release()
    harness.delete_epoch()
    again = harness.candidate("b").lease.acquire()
    assert isinstance(again, Acquired) and again.epoch == 42 and again.epoch_was_missing


def test_candidates_and_their_schedule_sets(harness: StoreHarness) -> None:
    a = harness.candidate("a", fingerprint="f1", version="1.0")
    b = harness.candidate("b", fingerprint="f2", version="1.1")
    lead(a)
    b.lease.acquire()
    renewed = a.lease.renew()
    assert renewed is not None and sorted(renewed.live) == [("f1", "1.0"), ("f2", "1.1")]
    a.lease.publish_schedule_set({SID: "s1"})
    a.lease.publish_schedule_set({SID: "other"})  # the first publication stays
    b.lease.publish_schedule_set({"job/b": "s2"})
    assert a.lease.schedule_sets(["f1", "f2", "f3"]) == {"f1": {SID: "s1"}, "f2": {"job/b": "s2"}, "f3": None}
    a.lease.prune_schedule_sets({"f1"})
    assert a.lease.schedule_sets(["f1", "f2"]) == {"f1": {SID: "s1"}, "f2": None}
    b.lease.release()
    renewed = a.lease.renew()
    assert renewed is not None and renewed.live == [("f1", "1.0")]


def test_every_reply_that_carries_the_stores_time_is_observed_on_the_clock(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    observed = [a.clock.observations]

    def step() -> int:
        observed.append(a.clock.observations)
        return observed[-1] - observed[-2]

    token, epoch = lead(a)
    assert step() == 1
    assert a.lease.renew() and step() == 1
    base = a.ledger.sync(token, epoch, [SID], now_ms=harness.now_ms() - 600_000).ticks[SID]
    assert step() == 1
    a.ledger.claim(token, epoch, "b1", [fire(base + 1000)])
    assert step() == 1
    a.ledger.register([SyncEntry("job/b")])
    a.ledger.settle("b2", epoch=epoch, claims=[])
    a.lease.release()
    assert step() == 0
    assert abs(a.clock.now_ms() - harness.now_ms()) < 1000


# -- fencing -------------------------------------------------------------------


def test_a_deposed_token_is_refused_and_writes_nothing(harness: StoreHarness) -> None:
    old, new = harness.candidate("old"), harness.candidate("new")
    token, epoch, base = synced(harness, old, SID)
    harness.delete_lease()
    new_token, new_epoch = lead(new)
    assert new_epoch == epoch + 1
    before, history = harness.ledger_value(SID), harness.history()
    with pytest.raises(NotLeader):
        old.ledger.claim(token, epoch, "b-old", [fire(base + 1000)])
    with pytest.raises(NotLeader):
        old.ledger.sync(token, epoch, [SID, "job/new"])
    assert harness.ledger_value(SID) == before and harness.ledger_value("job/new") is None
    assert harness.history() == history
    assert new.ledger.claim(new_token, new_epoch, "b-new", [fire(base + 1000)]).results == [FIRE]


# -- claims --------------------------------------------------------------------


def test_a_tick_is_granted_once_newer_than_the_last_and_again_only_to_its_epoch(harness: StoreHarness) -> None:
    a, b = harness.candidate("a"), harness.candidate("b")
    token, epoch, base = synced(harness, a, SID)
    reply = a.ledger.claim(token, epoch, "b1", [fire(base + 1000), missed(base + 2000, "job/none")])
    assert reply.results == [FIRE, LOST]  # no entry for job/none: sync first
    assert abs(reply.server_ms - harness.now_ms()) < 1000
    assert harness.ledger_value(SID) == f"{base + 1000}:{epoch}:{int(FIRE)}"
    assert a.ledger.claim(token, epoch, "b2", [fire(base + 1000)]).results == [FIRE]  # a retry, same answer
    assert a.ledger.claim(token, epoch, "b3", [fire(base)]).results == [REFUSED]
    assert a.ledger.claim(token, epoch, "b4", [missed(base + 2000), fire(base + 2000)]).results == [RECORDED, RECORDED]
    a.lease.release()
    token_b, epoch_b = lead(b)
    assert b.ledger.claim(token_b, epoch_b, "b5", [fire(base + 2000)]).results == [REFUSED]
    assert b.ledger.claim(token_b, epoch_b, "b6", [fire(base + 3000)]).results == [FIRE]


def test_a_tick_after_the_stores_now_is_not_yet_decided(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    later = harness.now_ms() + 60_000
    assert a.ledger.claim(token, epoch, "b1", [fire(later)]).results == [NOT_YET]
    assert harness.ledger_value(SID) == f"{base}:{epoch}:baseline"
    assert harness.history() == []


def test_claims_write_history_entries_with_their_outcomes(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID, "job/b")
    a.ledger.claim(token, epoch, "b1", [missed(base + 1000), fire(base + 1000, "job/b"), fire(base + 500, "job/b")])
    assert [(e.schedule_id, e.tick_ms, e.outcome, e.epoch, e.detail, e.message_id) for e in harness.history()] == [
        (SID, base + 1000, "missed", str(epoch), "caught up later", ""),
        ("job/b", base + 1000, "fired", str(epoch), "", f"m-job/b-{base + 1000}"),
    ]


def test_a_paused_schedule_or_actor_records_its_ticks_as_paused(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID, "job/b", "other/c")
    harness.pause(SID)
    harness.pause(whole_actor("other"))
    claims = [fire(base + 1000), fire(base + 1000, "job/b"), fire(base + 1000, "other/c"), missed(base + 2000)]
    assert a.ledger.claim(token, epoch, "b1", claims).results == [PAUSED, FIRE, PAUSED, RECORDED]
    assert [e.outcome for e in harness.history()] == ["paused", "fired", "paused", "missed"]


def test_a_pause_with_an_expiry_pauses_ticks_before_it_and_the_leaders_claim_ends_it(harness: StoreHarness) -> None:
    """Given a schedule paused until an instant and an actor paused until a
    later one, When the leader claims ticks on both sides of the instants,
    Then ticks before an expiry are paused and ticks from it fire, And the
    claim that finds an expiry passed removes that pause (the leader ends
    it, under its lease), leaving the one still running."""
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID, "other/c")
    harness.pause(SID, until_ms=base + 2000)
    harness.pause(whole_actor("other"), until_ms=harness.now_ms() + 600_000)
    claims = [fire(base + 1000), fire(base + 2000), fire(base + 1000, "other/c")]
    assert a.ledger.claim(token, epoch, "b1", claims).results == [PAUSED, FIRE, PAUSED]
    assert harness.paused() == {whole_actor("other")}


def test_an_overlapping_tick_is_skipped_while_the_running_mark_lives(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID, "job/b")
    claims = [fire(base + 1000, overlap_ttl_ms=60_000), fire(base + 2000, overlap_ttl_ms=60_000)]
    assert a.ledger.claim(token, epoch, "b1", claims).results == [FIRE, SKIPPED]
    assert harness.is_running(SID) and not harness.is_running("job/b")
    assert a.ledger.claim(token, epoch, "b2", [fire(base + 3000, overlap_ttl_ms=60_000)]).results == [SKIPPED]
    assert a.ledger.claim(token, epoch, "b3", [fire(base + 3000, "job/b")]).results == [FIRE]  # no overlap guard
    assert [e.outcome for e in harness.history()] == ["fired", "skipped", "skipped", "fired"]


def test_a_replaced_or_removed_runtime_definition_is_gone_for_its_old_revision(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch = lead(a)
    first = harness.add_runtime("report", "* * * * *", "r1")
    start = int(str(harness.ledger_value("report:r1")).split(":")[0])
    assert harness.ledger_value("report:r1") == f"{start}:0:baseline"
    harness.pass_time(5)
    tick = start + 1
    assert a.ledger.claim(token, epoch, "b1", [fire(tick, "report:r1", revision=first.revision)]).results == [FIRE]
    # Same shape: a new revision, the ledger entry kept.
    second = harness.add_runtime("report", "* * * * *", "r1")
    assert second.revision == first.revision + 1
    assert harness.ledger_value("report:r1") == f"{tick}:{epoch}:{int(FIRE)}"
    assert a.ledger.claim(token, epoch, "b2", [fire(tick + 1, "report:r1", revision=first.revision)]).results == [GONE]
    assert harness.remove_runtime("report", "r1") is True
    assert harness.remove_runtime("report", "r1") is False
    assert a.ledger.claim(token, epoch, "b3", [fire(tick + 1, "report:r1", revision=second.revision)]).results == [GONE]
    assert [e.outcome for e in harness.history()] == ["fired"]


def test_a_one_shot_in_the_past_is_refused_and_a_decided_one_is_retired_only_at_its_revision(
    harness: StoreHarness,
) -> None:
    """Given a one-shot replaced once (same ticks) and its tick claimed,
    When the leader retires it at the replaced revision, Then nothing is
    removed; at the current one it is; one not decided yet is kept, and an
    'at' not after the store's time is refused."""
    a = harness.candidate("a")
    assert a.runtime is not None
    with pytest.raises(CronScheduleError, match="is not after"):
        harness.add_runtime("report", Schedule(at=harness.now_ms() - 1), "old")
    # Both writes must land before `at` (a one-shot lies in the future): a
    # margin no slow step eats, then the store's clock is waited past it.
    at = harness.now_ms() + 5_000
    once = harness.add_runtime("report", Schedule(at=at), "once")
    newer = harness.add_runtime("report", Schedule(at=at, kwargs={"x": 1}), "once")  # same ticks, new revision
    assert a.runtime.retire([newer]) == []  # its tick is not decided yet
    harness.pass_time(at + 10 - harness.now_ms())
    token, epoch = lead(a)  # (after the wait, which outlasts the harness's lease)
    assert a.ledger.claim(token, epoch, "b1", [fire(at, "report:once", revision=newer.revision)]).results == [FIRE]
    assert a.runtime.retire([once]) == []  # a revision replaced since
    assert a.runtime.retire([newer]) == ["report:once"]
    assert harness.remove_runtime("report", "once") is False


def test_a_runtime_replacement_with_other_ticks_or_a_re_add_starts_from_the_write(harness: StoreHarness) -> None:
    first = harness.add_runtime("report", "* * * * *", "r1")
    harness.set_ledger_value("report:r1", "1000:3:1")
    harness.add_runtime("report", "*/5 * * * *", "r1")
    restarted = harness.ledger_value("report:r1")
    assert restarted is not None and restarted.endswith(":0:baseline") and int(restarted.split(":")[0]) > 1000
    harness.remove_runtime("report", "r1")
    harness.set_ledger_value("report:r1", "2000:3:1")
    again = harness.add_runtime("report", "* * * * *", "r1")
    assert again.revision == first.revision + 3
    assert [(e.schedule_id, e.outcome, e.epoch) for e in harness.history()] == [("report:r1", "rebased", "0")] * 2
    assert "replaced with other ticks" in harness.history()[0].detail
    assert "added again after its removal" in harness.history()[1].detail


def test_a_running_mark_expires_after_its_overlap_ttl(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    assert a.ledger.claim(token, epoch, "b1", [fire(base + 1000, overlap_ttl_ms=100)]).results == [FIRE]
    harness.pass_time(150)
    assert not harness.is_running(SID)
    assert a.ledger.claim(token, epoch, "b2", [fire(base + 2000, overlap_ttl_ms=100)]).results == [FIRE]


def test_claims_of_one_schedule_in_one_batch_are_decided_in_order(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    claims = [fire(base + 2000), fire(base + 1000), fire(base + 2000), missed(base + 3000)]
    assert a.ledger.claim(token, epoch, "b1", claims).results == [FIRE, REFUSED, FIRE, RECORDED]
    assert harness.ledger_value(SID) == f"{base + 3000}:{epoch}:{int(RECORDED)}"
    assert [e.tick_ms - base for e in harness.history()] == [2000, 3000]


def test_an_entry_in_the_future_is_not_claimed_but_left_for_a_sync(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    future = f"{harness.now_ms() + 3_600_000}:1:1"
    harness.set_ledger_value(SID, future)
    assert a.ledger.claim(token, epoch, "b1", [fire(base + 1000)]).results == [LOST]
    assert harness.ledger_value(SID) == future


def test_a_batch_record_of_another_length_is_decided_afresh_and_reported(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID, "job/b")
    harness.set_batch_record("b1", "1")
    reply = a.ledger.claim(token, epoch, "b1", [fire(base + 1000), fire(base + 1000, "job/b")])
    assert reply.results == [FIRE, FIRE] and reply.corrupt == Corrupt.BATCH
    assert a.ledger.settle("b1", epoch=epoch, claims=[]).results == [FIRE, FIRE]


def test_a_wiped_store_restarts_the_epoch_and_reports_the_ledger_lost(harness: StoreHarness) -> None:
    a, b = harness.candidate("a"), harness.candidate("b")
    synced(harness, a, SID)
    harness.flushall()
    acquired = b.lease.acquire()
    assert isinstance(acquired, Acquired) and acquired.epoch == 1 and acquired.epoch_was_missing
    assert b.lease.token is not None
    reply = b.ledger.sync(b.lease.token, acquired.epoch, [SID], expect_ledger=True)
    assert reply.ledger_lost and reply.codes == {SID: SyncCode.BASELINE}
    assert a.lease.renew() is None


# -- sync and register -------------------------------------------------------------


def test_sync_baselines_missing_entries_and_then_reads_them(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch = lead(a)
    base = harness.now_ms() - 600_000
    seen: list[tuple[str, int]] = []
    reply = a.ledger.sync(token, epoch, [SID, "job/b"], now_ms=base, on_chunk=seen.extend)
    assert reply.ticks == {SID: base, "job/b": base} and dict(seen) == reply.ticks
    assert harness.ledger_value(SID) == f"{base}:{epoch}:baseline"
    assert reply.codes == {SID: SyncCode.BASELINE, "job/b": SyncCode.BASELINE}
    assert not reply.ledger_lost
    again = a.ledger.sync(token, epoch, [SID, "job/b"])
    assert again.ticks == reply.ticks and again.codes == {}
    # Without an estimate of the caller's, a baseline lies at the store's now.
    fresh = a.ledger.sync(token, epoch, ["job/c"]).ticks["job/c"]
    assert abs(fresh - harness.now_ms()) < 1000
    # An estimate ahead of the store's now does not put a baseline after it.
    ahead = a.ledger.sync(token, epoch, ["job/d"], now_ms=harness.now_ms() + 3_600_000).ticks["job/d"]
    assert ahead <= harness.now_ms()
    assert harness.history() == []


def test_sync_replaces_corrupt_and_future_entries_by_baselines_and_records_them(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch = lead(a)
    harness.set_ledger_value(SID, "not a tick")
    harness.set_ledger_value("job/b", f"{harness.now_ms() + 3_600_000}:1:1")
    harness.set_ledger_value("job/c", "1000:1:1")
    base = harness.now_ms() - 600_000
    reply = a.ledger.sync(token, epoch, [SID, "job/b", "job/c"], now_ms=base)
    assert reply.codes == {SID: SyncCode.CORRUPT, "job/b": SyncCode.FUTURE}
    assert reply.ticks == {SID: base, "job/b": base, "job/c": 1000}
    assert [(e.schedule_id, e.tick_ms, e.outcome) for e in harness.history()] == [
        (SID, base, "rebased"),
        ("job/b", base, "rebased"),
    ]


def test_sync_restarts_a_reshaped_schedule(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch = lead(a)
    base = harness.now_ms() - 600_000
    a.ledger.sync(token, epoch, [SyncEntry(SID, shape="s1")], now_ms=base)
    harness.set_ledger_value(SID, "1000:1:1")
    reply = a.ledger.sync(token, epoch, [SyncEntry(SID, shape="s2")])
    assert reply.codes == {SID: SyncCode.RESHAPED}
    assert [e.outcome for e in harness.history()] == ["rebased"]


def test_sync_reports_a_lost_ledger_once_when_one_was_expected(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch = lead(a)
    reply = a.ledger.sync(token, epoch, [SID], expect_ledger=True)
    assert reply.ledger_lost
    assert [(e.schedule_id, e.outcome) for e in harness.history()] == [("*", Outcome.LEDGER_LOST.value)]
    assert not a.ledger.sync(token, epoch, [SID], expect_ledger=True).ledger_lost


def test_register_writes_only_missing_entries_unfenced(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    harness.set_ledger_value(SID, "1000:1:1")
    assert a.ledger.register([SyncEntry(SID, shape="s"), SyncEntry("job/b", shape="s")]) == 1
    assert harness.ledger_value(SID) == "1000:1:1"
    value = harness.ledger_value("job/b")
    assert value is not None and value.endswith(":0:baseline")
    assert a.ledger.register([SyncEntry("job/b")]) == 0
    # The registered shape is known: a sync with another one restarts it.
    token, epoch = lead(a)
    assert a.ledger.sync(token, epoch, [SyncEntry("job/b", shape="t")]).codes == {"job/b": SyncCode.RESHAPED}


# -- lost replies ----------------------------------------------------------------


def test_a_lost_claim_reply_is_settled_from_the_batch_record(harness: StoreHarness) -> None:
    a, b = harness.candidate("a"), harness.candidate("b")
    token, epoch, base = synced(harness, a, SID, "job/b")
    claims = [fire(base + 1000), missed(base + 1000, "job/b")]
    harness.claim_reply_lost(a, token, epoch, "lost-1", claims)
    settled = a.ledger.settle("lost-1", epoch=epoch, claims=claims)
    assert settled.results == [FIRE, RECORDED] and not settled.record_corrupt
    assert a.ledger.settle("lost-1", epoch=epoch, claims=claims).results == [FIRE, RECORDED]
    # A copy still in flight gets the first run's answers, even once the
    # lease moved on, and decides nothing again.
    a.lease.release()
    lead(b)
    assert a.ledger.claim(token, epoch, "lost-1", claims).results == [FIRE, RECORDED]
    assert len(harness.history()) == 2


def test_a_batch_settled_before_it_ran_is_void_and_never_runs(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    assert a.ledger.settle("never", epoch=epoch, claims=[fire(base + 1000)]).results is None
    assert a.ledger.claim(token, epoch, "never", [fire(base + 1000)]).results == [REFUSED]
    assert harness.ledger_value(SID) == f"{base}:{epoch}:baseline" and harness.history() == []


def test_an_unusable_batch_record_is_read_back_from_the_ledger_by_epoch(harness: StoreHarness) -> None:
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID, "job/b")
    a.ledger.claim(token, epoch, "ran", [fire(base + 1000)])
    harness.set_batch_record("ran", "garbage")
    claims = [fire(base + 1000), fire(base + 1000, "job/b")]
    settled = a.ledger.settle("ran", epoch=epoch, claims=claims)
    assert settled.results == [FIRE, REFUSED] and settled.record_corrupt
    assert a.ledger.settle("ran", epoch=epoch + 1, claims=claims).results is None  # now void
    assert a.ledger.claim(token, epoch, "ran", claims).results == [REFUSED, REFUSED]


def test_an_unusable_batch_record_settles_every_granted_tick_of_one_schedule(harness: StoreHarness) -> None:
    """Given a catch-up batch ("each") holding a missed tick and two granted
    ticks of one schedule, whose reply was lost and whose record was then
    overwritten, when the leader settles it, then every tick comes back as
    it was decided (the ledger holds only the newest: the earlier grant was
    settled as refused, and never enqueued)."""
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    claims = [missed(base + 1000), fire(base + 2000), fire(base + 3000)]
    assert a.ledger.claim(token, epoch, "each", claims).results == [RECORDED, FIRE, FIRE]
    harness.set_batch_record("each", "garbage")
    settled = a.ledger.settle("each", epoch=epoch, claims=claims)
    assert settled.results == [RECORDED, FIRE, FIRE] and settled.record_corrupt


# -- runtime reads ------------------------------------------------------------------


def test_runtime_versions_changes_and_tombstones(harness: StoreHarness) -> None:
    runtime = harness.candidate("a").runtime
    assert runtime is not None
    assert runtime.version() == 0 and runtime.load_all() == (0, {})
    r1 = harness.add_runtime("report", "* * * * *", "r1")
    r2 = harness.add_runtime("report", "0 * * * *", "r2")
    assert (r1.revision, r2.revision) == (1, 2) and runtime.version() == 2
    version, loaded = runtime.load_all()
    assert version == 2 and loaded == {"report:r1": r1, "report:r2": r2}
    assert loaded["report:r1"].revision == 1
    assert runtime.changes_since(0) == (2, {"report:r1": r1, "report:r2": r2})
    harness.remove_runtime("report", "r1")
    assert runtime.changes_since(2) == (3, {"report:r1": None})
    assert runtime.changes_since(3) == (3, {})
    assert runtime.load_all() == (3, {"report:r2": r2})
    harness.flushall()  # a wipe: the counter goes back
    assert runtime.changes_since(3) == (0, {})


def test_owed_ticks_of_a_replaced_definition_are_dropped_and_recorded(harness: StoreHarness) -> None:
    runtime = harness.candidate("a").runtime
    assert runtime is not None
    old = harness.add_runtime("report", "* * * * *", "r1")
    kept = harness.add_runtime("report", "* * * * *", "r2")
    harness.add_runtime("report", "* * * * *", "r1")
    assert runtime.drop_stale([(old, 60_000, "m1"), (kept, 60_000, "m2")]) == [True, False]
    assert [(e.schedule_id, e.tick_ms, e.outcome, e.message_id) for e in harness.history()] == [
        ("report:r1", 60_000, "dropped", "m1")
    ]


# -- memory only: faults at the store boundary ----------------------------------------


def test_memory_a_refused_operation_runs_nowhere() -> None:
    harness = MemoryHarness()
    a = harness.candidate("a")
    token, epoch, base = synced(harness, a, SID)
    harness.server.refuse("claim")
    with pytest.raises(ConnectionRefusedError):
        a.ledger.claim(token, epoch, "b1", [fire(base + 1000)])
    assert harness.ledger_value(SID) == f"{base}:{epoch}:baseline" and harness.history() == []
    assert a.ledger.settle("b1", epoch=epoch, claims=[fire(base + 1000)]).results is None
    assert isinstance(harness.server, MemoryServer)


def test_memory_a_lost_acquire_reply_is_found_ours_on_the_retry() -> None:
    harness = MemoryHarness()
    a, b = harness.candidate("a"), harness.candidate("b")
    harness.server.lose_reply("acquire")
    with pytest.raises(TimeoutError):
        a.lease.acquire()
    assert a.lease.token is None and isinstance(b.lease.acquire(), Held)
    retried = a.lease.acquire()
    assert isinstance(retried, Acquired) and retried.epoch == 1


def test_memory_a_follower_waits_on_the_injected_clock() -> None:
    harness = MemoryHarness()
    harness.server.wait = lambda seconds: harness.pass_time(int(seconds * 1000))
    a, b = harness.candidate("a"), harness.candidate("b")
    lead(a)
    start = harness.now_ms()
    assert b.lease.wait_for_release(700) is False
    assert harness.now_ms() == start + 700


def test_memory_fast_takeover_deposes_a_leader_whose_presence_connection_closed() -> None:
    harness = MemoryHarness()
    clock = ServerClock(monotonic=harness.time.monotonic, wall=harness.time.wall)
    a = InMemoryStore(harness.server, clock=clock, ttl_ms=2000, presence=True)
    b = InMemoryStore(harness.server, clock=clock, ttl_ms=2000, presence=True)
    lead(a)
    assert b.lease.depose_if_gone() is False  # a's connection is open
    assert a.lease.presence is not None
    harness.server.disconnect(a.lease.presence)
    assert b.lease.depose_if_gone() is True
    assert a.lease.renew() is None and isinstance(b.lease.acquire(), Acquired)


def test_memory_a_lease_lives_until_its_expiry_instant_as_a_redis_key_does() -> None:
    harness = MemoryHarness()
    a, b = harness.candidate("a", ttl_ms=1000), harness.candidate("b", ttl_ms=1000)
    lead(a)
    harness.pass_time(1000)
    held = b.lease.acquire()
    assert isinstance(held, Held) and held.remaining_ms == 0
    harness.pass_time(1)
    assert isinstance(b.lease.acquire(), Acquired)


def test_memory_a_lost_renewal_reply_still_renewed() -> None:
    harness = MemoryHarness()
    a, b = harness.candidate("a", ttl_ms=1000), harness.candidate("b", ttl_ms=1000)
    lead(a)
    harness.pass_time(800)
    harness.server.lose_reply("renew")
    with pytest.raises(TimeoutError):
        a.lease.renew()
    harness.pass_time(800)
    held = b.lease.acquire()
    assert isinstance(held, Held) and held.renewals == "2"
    assert a.lease.renew() is not None  # the token was kept across the lost reply


def test_a_runtime_write_or_removal_wakes_a_leader_waiting_for_changes(harness: StoreHarness) -> None:
    """Given a leader waiting for runtime changes, a write and a removal
    each end its wait once (the notification is consumed), and its own
    wake-up list ends it too; with nothing pushed the wait times out."""
    a = harness.candidate("a")
    lead(a)
    notify = a.keys.runtime_notify
    harness.add_runtime("job", "* * * * *", name="r")
    assert a.lease.wait_for_push(notify, 1000, bound_ms=2000) == notify
    assert a.lease.wait_for_push(notify, 20, bound_ms=2000) is None
    assert harness.remove_runtime("job", "r")
    assert a.lease.wait_for_push(notify, 1000, bound_ms=2000) == notify
    a.lease.wake_self()
    popped = a.lease.wait_for_push(notify, 1000, bound_ms=2000)
    assert popped is not None and popped != notify


def test_a_renewal_reports_the_runtime_schedules_version(harness: StoreHarness) -> None:
    """The renewal carries the runtime version counter, so an idle leader
    whose notification went missing (a writer of a version that did not
    publish, a reconnection) learns of the change within a renewal
    interval, at no round trip of its own."""
    a = harness.candidate("a")
    lead(a)
    renewed = a.lease.renew()
    assert renewed is not None and renewed.runtime_version == 0
    harness.add_runtime("job", "* * * * *", name="r")
    assert harness.remove_runtime("job", "r")
    renewed = a.lease.renew()
    assert renewed is not None and renewed.runtime_version == 2


# -- durable writes (replicas) --------------------------------------------------


def test_writes_too_few_replicas_acknowledge_are_unconfirmed_until_a_replica_holds_them(
    harness: StoreHarness,
) -> None:
    """Given a candidate that requires one replica and none attached: its
    acquisition ran on the master but does not count; once a replica holds
    the writes, the retry finds the lease its own (same epoch)."""
    a = harness.candidate("a", replicas=1, ttl_ms=60_000)  # outlives starting a replica
    with pytest.raises(Unconfirmed):
        a.lease.acquire()
    assert a.lease.token is None
    harness.attach_replica()
    acquired = confirmed(a.lease.acquire)
    assert isinstance(acquired, Acquired) and acquired.epoch == 1


def test_an_unconfirmed_claim_ran_and_is_settled_once_a_replica_acknowledges(harness: StoreHarness) -> None:
    """A claim too few replicas acknowledge is a lost reply: it ran (its
    tick decided), and its settle answers the results only once a replica
    holds them."""
    harness.attach_replica()
    a = harness.candidate("a", replicas=1)
    token, epoch, base = synced(harness, a, SID)
    b = harness.candidate("b", replicas=2)  # asks more replicas than there are: never confirmed
    with pytest.raises(Unconfirmed):
        b.ledger.claim(token, epoch, "u-1", [fire(base + 1000)])
    with pytest.raises(Unconfirmed):
        b.ledger.settle("u-1", epoch=epoch, claims=[fire(base + 1000)])
    assert harness.ledger_value(SID) == f"{base + 1000}:{epoch}:{int(FIRE)}"
    assert confirmed(lambda: a.ledger.settle("u-1", epoch=epoch, claims=[fire(base + 1000)])).results == [FIRE]
