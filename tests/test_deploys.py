"""Across deploys: a schedule keeps its identity when its expression
changes, so two code versions leading in turn never enqueue the same wall
instant twice; a changed expression starts from now (no burst); mixed
schedule sets are reported once; a second app on the same prefix loses no
catch-up."""

from __future__ import annotations

import collections

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.candidates import fingerprint
from dramatiq_cron_middleware.schedules import expression
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, schedules_for_actor
from tests.support.inprocess import InProcessApp, in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def lead(app: InProcessApp, others: list[InProcessApp], server: RedisServer) -> None:
    """Make ``app`` the leader: stop the others' leaders, wait, restart them."""
    for other in others:
        other.middleware.stop()
    wait_for(lambda: app.leader.leading, timeout=60, interval=0.01, what="the chosen app to lead")
    for other in others:
        other.middleware.start(other.broker)


def instants(*apps: InProcessApp) -> collections.Counter[str]:
    """How often each wall instant of the actor was enqueued, by any app."""
    return collections.Counter(tick for app in apps for _, tick, _ in app.sent("report"))


@pytest.mark.slow
def test_old_and_new_code_leading_in_turn_never_enqueue_one_instant_twice(redis_server: RedisServer) -> None:
    """Given the old code declaring ``*/2 * * * * *`` and the new code
    ``* * * * * *`` for the same actor (no name=), when leadership passes
    old -> new -> old -> new (pods replaced one by one, a rollback), then
    no wall instant is enqueued twice, with the same message id wherever it
    could have been, and no burst of catch-up follows a change."""
    old_app = in_process_app(redis_server.url, {"report": "*/2 * * * * *"}, start=False, app_version="v1")
    new_app = in_process_app(redis_server.url, {"report": "* * * * * *"}, start=False, app_version="v2")
    with old_app as old, new_app as new:
        old.middleware.start(old.broker)
        wait_for(lambda: len(old.sent("report")) >= 2, timeout=60, what="the old code to fire")
        new.middleware.start(new.broker)
        for leader, other in ((new, old), (old, new), (new, old)):
            lead(leader, [other], redis_server)
            mark = len(leader.sent("report"))
            wait_for(lambda leader=leader, mark=mark: len(leader.sent("report")) >= mark + 2, timeout=60, what="fires")
        counts = instants(old, new)
        assert [t for t, n in counts.items() if n > 1] == [], counts
        # No burst: at most one enqueue per wall second, whoever led.
        per_second = collections.Counter(t[:19] for t in counts)
        assert max(per_second.values()) == 1
        ids = [mid for app in (old, new) for _, _, mid in app.sent("report")]
        assert len(ids) == len(set(ids))


def test_mixed_schedule_sets_are_reported_once_naming_the_difference(redis_server: RedisServer) -> None:
    first = {"ping": "* * * * * *", "report": "* * * * * *", "cleanup": "0 3 * * *"}
    second = {"ping": "* * * * * *", "report": "*/5 * * * * *", "audit": Schedule("0 4 * * *")}
    with (
        in_process_app(redis_server.url, first, app_version="v1") as a,
        in_process_app(redis_server.url, second, app_version="v2") as b,
    ):
        wait_for(lambda: a.leader.leading or b.leader.leading, timeout=60, what="a leader")
        leader = a if a.leader.leading else b
        wait_for(lambda: leader.warnings("different schedule sets"), timeout=60, what="the mixed-set warning")
        warning = leader.warnings("different schedule sets")
        assert len(warning) == 1
        text = warning[0]
        assert "rolling deploy" in text
        for name in ("cleanup", "audit", "report"):
            assert name in text
        mark = len(leader.sent("ping"))
        wait_for(lambda: len(leader.sent("ping")) >= mark + 3, timeout=60, what="more fires")
        assert len(leader.warnings("different schedule sets")) == 1


def test_a_second_app_on_the_prefix_catches_up_from_when_it_started(redis_server: RedisServer) -> None:
    """Given app A leading and app B (other schedules, same prefix) starting
    beside it, when B finally leads, then B's schedules catch up the ticks
    due since B started (within the window), instead of baselining at the
    moment B first leads and losing them."""
    with in_process_app(redis_server.url, {"alpha": "* * * * * *"}) as a:
        wait_for(lambda: a.leader.leading, timeout=60, what="A to lead")
        with in_process_app(redis_server.url, {"beta": "* * * * * *"}) as b:
            wait_for(lambda: b.leader.schedule_sets.registered, timeout=60, what="B to register its schedules")
            wait_for(lambda: len(a.sent("alpha")) >= 4, timeout=60, what="A to fire while B waits")
            assert b.sent("beta") == []
            assert a.warnings("two apps may share the prefix"), a.warnings()
            a.middleware.stop()
            wait_for(lambda: len(b.sent("beta")) >= 4, timeout=60, what="B to catch up")
            outcomes = [fields["outcome"] for _, fields in redis_server.client().xrange(b.keys.history)
                        if fields["schedule"] == "beta"]  # fmt: skip
            assert "caught_up" in outcomes


def test_processes_reading_cron_expressions_differently_are_a_mixed_set(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given two processes of the same app version declaring the same
    schedules, one of them with another croniter major (so it could fire an
    expression differently), then the leader reports a mixed set that
    names the cron semantics, and ``status`` would count two sets."""
    crons = {"report": "59/15 * * * *", "ping": "* * * * * *"}
    monkeypatch.setattr(expression, "SEMANTICS", "cron rules 1, croniter 6")
    with in_process_app(redis_server.url, crons, app_version="v1") as old:
        monkeypatch.undo()
        with in_process_app(redis_server.url, crons, app_version="v1") as new:
            assert old.leader.store.lease.fingerprint != new.leader.store.lease.fingerprint
            wait_for(lambda: old.leader.leading or new.leader.leading, timeout=60, what="a leader")
            leader = old if old.leader.leading else new
            wait_for(lambda: leader.warnings("different schedule sets"), timeout=20, what="the mixed-set warning")
            text = leader.warnings("different schedule sets")[0]
            assert "croniter 6" in text and expression.SEMANTICS in text, text
            assert "read cron expressions under different rules" in text, text
            assert "changed -" in text, text  # the schedules themselves are the same


def test_the_fingerprint_carries_the_cron_semantics_only_where_cron_expressions_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def bound(spec: object) -> list[BoundSchedule]:
        return schedules_for_actor("report", "default", spec, timezone="UTC", catch_up="each", catch_up_window=0)

    cron, interval = bound("0 * * * *"), bound(Schedule(every=60_000))
    before = fingerprint(cron), fingerprint(interval)
    monkeypatch.setattr(expression, "SEMANTICS", "cron rules 0, croniter 5")
    assert fingerprint(cron) != before[0]
    assert fingerprint(interval) == before[1]
