"""Bad input is refused at the earliest moment, in one clear error that
names the value without echoing all of it (issue 28 item 9): a
``Schedule`` checks its own name, epoch milliseconds are ASCII digits, an
instant before 1970 is an error and not a traceback, and a declared
schedule whose actor left the broker is skipped with one WARNING."""

from __future__ import annotations

import logging
from collections.abc import Callable

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.errors import CronScheduleError
from dramatiq_cron_middleware.schedules.instants import instant_ms
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, app_env, cli

HISTORY = "{dramatiq-cron}:history"


@pytest.mark.parametrize("name", ["has space", "a/b", "x:y", "", "x" * 65, "é"])
def test_a_schedule_built_on_its_own_refuses_a_bad_name(name: str) -> None:
    with pytest.raises(CronScheduleError) as caught:
        Schedule("0 9 * * *", name=name)
    assert str(caught.value).startswith("Schedule") and "name must be 1 to 64" in str(caught.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda big: Schedule("0 9 * * *", name=big),
        lambda big: Schedule(big),
        lambda big: Schedule("0 9 * * *", timezone=big),
        lambda big: Schedule(at=big),  # type: ignore[arg-type]
    ],
)
def test_a_10_kb_value_is_not_echoed_in_full(build: Callable[[str], Schedule]) -> None:
    big = "y" * 10_000
    with pytest.raises(CronScheduleError) as caught:
        build(big)
    message = str(caught.value)
    assert len(message) < 400 and "10002 characters" in message, message


@pytest.mark.parametrize("text", ["\u0661\u0662\u0663\u0664", "\uff11\uff12\uff13", "\u00b2"])
def test_unicode_digits_are_not_epoch_milliseconds(text: str) -> None:
    assert not text.isascii() and text.isdigit()
    with pytest.raises(ValueError, match="cannot read"):
        instant_ms(text)


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+00:00", "0001-01-01T00:00:00+14:00", "1969-12-31T23:59:59Z"])
def test_an_instant_before_1970_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="between 1970 and 9999"):
        instant_ms(text)


def test_instants_are_read_to_the_exact_millisecond() -> None:
    # 15475143849.994 s is 15475143849993.999... ms as a float.
    assert instant_ms("2460-05-21T11:04:09.994+00:00") == 15_475_143_849_994


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--from", "0001-01-01T00:00:00+00:00"),
        ("--from", "0001-01-01T00:00:00+14:00"),
        ("--from", "١٢٣٤"),
        ("--to", "0001-01-01T00:00:00+14:00"),
    ],
)
def test_backfill_from_year_one_is_one_line_and_exit_2(
    redis_server: RedisServer, record_dir: str, flag: str, value: str
) -> None:
    env = app_env(redis_server, record_dir)
    other = {"--from": "--to", "--to": "--from"}[flag]
    done = cli(env, "backfill", APP, "tick_0", flag, value, other, "2026-01-01T00:00:00Z")
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dramatiq-cron: error: "), done.stderr
    assert flag in lines[0] and "Traceback" not in done.stderr


def test_a_declared_schedule_whose_actor_left_the_broker_is_skipped_with_one_warning(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Given two actors firing every second, When the second is removed
    from ``broker.actors`` (as django_dramatiq's test fixture clears it)
    before the worker boots, Then the leader fires the first and never the
    second, and says so in one WARNING."""
    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=1000)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="kept", broker=broker, cron="* * * * * *")
    dramatiq.actor(lambda: None, actor_name="gone", broker=broker, cron="* * * * * *")
    del broker.actors["gone"]
    caplog.set_level(logging.WARNING)
    client = redis_server.client()

    def fired(schedule: str) -> int:
        entries = client.xrange(HISTORY)
        return sum(1 for _, f in entries if f.get("schedule") == schedule and f.get("outcome") == "fired")

    middleware.start(broker)
    try:
        wait_for(lambda: fired("kept") >= 3, timeout=60, what="three ticks of the kept actor")
    finally:
        middleware.stop()
        broker.close()
    assert fired("gone") == 0
    assert client.hget("{dramatiq-cron}:ticks", "gone") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "'gone'" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_10_kb_runtime_name_or_target_is_not_echoed_in_full() -> None:
    from dramatiq.brokers.stub import StubBroker

    from dramatiq_cron_middleware.testing import CronSimulator

    broker = StubBroker()
    cron = CronMiddleware()
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="report", broker=broker)
    simulator = CronSimulator(broker, now=1_893_456_000_000)
    big = "z" * 10_000
    try:
        for call in (lambda: cron.add("report", "0 9 * * *", name=big), lambda: cron.trigger(big)):
            with pytest.raises(CronScheduleError) as caught:
                call()
            assert len(str(caught.value)) < 400 and "10002 characters" in str(caught.value), str(caught.value)
    finally:
        simulator.close()
        broker.close()
