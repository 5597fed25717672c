"""A schedule's args/kwargs must fit its actor's signature, or it is refused
where it is written (at declaration, at ``add``), not by a TypeError in the
worker on every tick.

Declared schedules need no Redis; runtime ones are written to a real
redis-server, and refused ones must write nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, CronScheduleError, Schedule
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, cli


def send_report(tenant_id: int, *, full: bool = False) -> None:
    pass


def declare(fn: Any, cron: Any) -> CronMiddleware:
    broker = StubBroker()
    middleware = CronMiddleware(redis="redis://127.0.0.1:1")
    broker.add_middleware(middleware)
    dramatiq.actor(fn, broker=broker, cron=cron)
    return middleware


MISMATCHES = [
    ("missing", Schedule("0 9 * * *", name="daily"), "send_report/daily", ["missing", "'tenant_id'"]),
    (
        "unexpected",
        Schedule("0 9 * * *", kwargs={"tenant_id": 1, "tenant": 2}),
        "send_report",
        ["unexpected", "'tenant'"],
    ),
    ("too many", Schedule("0 9 * * *", name="x", args=(1, True)), "send_report/x", ["too many positional"]),
    ("twice", Schedule("0 9 * * *", name="x", args=(1,), kwargs={"tenant_id": 1}), "send_report/x", ["'tenant_id'"]),
]


@pytest.mark.parametrize(("schedule", "identity", "words"), [m[1:] for m in MISMATCHES], ids=[m[0] for m in MISMATCHES])
def test_a_declared_schedule_whose_arguments_do_not_fit_the_actor_is_refused_at_declaration(
    schedule: Schedule, identity: str, words: list[str]
) -> None:
    with pytest.raises(CronScheduleError) as raised:
        declare(send_report, schedule)
    message = str(raised.value)
    assert "actor 'send_report'" in message and f"schedule {identity!r}" in message, message
    assert "send_report(tenant_id, *, full=False)" in message, message
    for word in words:
        assert word in message, message


def test_one_bad_schedule_among_several_is_named() -> None:
    with pytest.raises(CronScheduleError, match=r"schedule 'send_report/b'.*'tenant_id'"):
        declare(send_report, [Schedule("0 9 * * *", kwargs={"tenant_id": 1}), Schedule("0 10 * * *", name="b")])


FITTING = [
    ("by position", Schedule("0 9 * * *", args=(1,))),
    ("by keyword", Schedule("0 9 * * *", kwargs={"tenant_id": 1, "full": True})),
    ("both", Schedule("0 9 * * *", args=[1], kwargs={"full": True})),
]


@pytest.mark.parametrize("schedule", [f[1] for f in FITTING], ids=[f[0] for f in FITTING])
def test_arguments_that_fit_the_signature_are_accepted(schedule: Schedule) -> None:
    [bound] = declare(send_report, schedule).all_schedules()
    assert bound.args == tuple(schedule.args) and bound.kwargs == dict(schedule.kwargs)


def test_an_actor_taking_anything_accepts_any_arguments() -> None:
    def anything(*args: Any, **kwargs: Any) -> None:
        pass

    declare(anything, Schedule("0 9 * * *", args=(1, 2, 3), kwargs={"x": 1}))


def test_an_actor_whose_signature_cannot_be_read_is_not_refused() -> None:
    """``max`` is a builtin without a signature (inspect raises ValueError)."""
    declare(max, Schedule("0 9 * * *", args=(1, 2)))


# -- runtime schedules ------------------------------------------------------------


@dataclass
class App:
    cron: CronMiddleware
    actor: dramatiq.Actor[Any, Any]
    redis: redis.Redis


@pytest.fixture
def app(redis_server: RedisServer) -> Iterator[App]:
    broker = StubBroker()
    cron = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(cron)
    actor = dramatiq.actor(send_report, broker=broker)
    yield App(cron=cron, actor=actor, redis=redis_server.client())


def test_a_runtime_schedule_missing_an_argument_is_refused_at_add_and_nothing_is_written(app: App) -> None:
    with pytest.raises(CronScheduleError) as raised:
        app.cron.add(app.actor, "0 9 * * mon", name="tenant-42")
    message = str(raised.value)
    assert "actor 'send_report'" in message and "schedule 'send_report:tenant-42'" in message, message
    assert "missing" in message and "'tenant_id'" in message, message
    assert app.redis.keys("{dramatiq-cron}:runtime*") == []


def test_a_runtime_schedule_with_an_unexpected_keyword_is_refused(app: App) -> None:
    with pytest.raises(CronScheduleError, match=r"'send_report:t'.*unexpected.*'tenant'"):
        app.cron.add("send_report", Schedule("0 9 * * *", kwargs={"tenant_id": 1, "tenant": 42}), name="t")


def test_add_many_with_one_mismatched_item_writes_nothing_and_names_it(app: App) -> None:
    items: list[tuple[object, str | Schedule, str]] = [
        (app.actor, Schedule("0 9 * * *", kwargs={"tenant_id": n}), f"tenant-{n}") for n in range(50)
    ]
    items.append((app.actor, "0 9 * * *", "tenant-50"))
    with pytest.raises(CronScheduleError, match=r"'send_report:tenant-50'.*'tenant_id'"):
        app.cron.runtime.add_many(items)
    assert app.redis.keys("{dramatiq-cron}:runtime*") == []
    stored = app.cron.runtime.add_many(items[:-1])
    assert len(stored) == 50 and stored[7].schedule.kwargs == {"tenant_id": 7}


def test_cli_add_refuses_arguments_that_do_not_fit_and_accepts_those_that_do(redis_server: RedisServer) -> None:
    """``plain_job(n)`` in the test app: ``add`` without ``n`` is one line
    on stderr, exit 2, nothing written; with ``--args [7]`` it is stored."""
    env = {"DRAMATIQ_CRON_REDIS_URL": redis_server.url}
    refused = cli(env, "add", APP, "plain_job", "0 * * * *", "--name", "x")
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    [line] = refused.stderr.splitlines()
    assert "'plain_job'" in line and "'plain_job:x'" in line and "'n'" in line, line
    assert redis_server.client().keys("{dramatiq-cron}:runtime*") == []
    stored = cli(env, "add", APP, "plain_job", "0 * * * *", "--name", "x", "--args", "[7]")
    assert stored.returncode == 0, stored.stderr
