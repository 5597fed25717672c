"""Bad monitoring options are refused with the actor (or argument) and the
value named; good ones reach the health policy."""

from __future__ import annotations

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import TimeLimit

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.errors import CronConfigurationError, CronScheduleError
from dramatiq_cron_middleware.monitoring.health import Policy
from dramatiq_cron_middleware.schedules.schedule import of_actor


@pytest.mark.parametrize(
    ("option", "value", "wanted"),
    [
        ("grace", -1, "grace must be a non-negative int of milliseconds, got -1"),
        ("max_runtime", 0, "max_runtime must be a positive int of milliseconds, got 0"),
        ("failure_threshold", 1.5, "failure_threshold must be a positive int of runs, got 1.5"),
        ("failure_threshold", True, "failure_threshold must be a positive int of runs, got True"),
    ],
)
def test_a_bad_schedule_threshold_is_refused_when_built_naming_the_value(
    option: str, value: object, wanted: str
) -> None:
    with pytest.raises(CronScheduleError) as raised:
        Schedule("0 3 * * *", **{option: value})
    assert wanted in str(raised.value) and str(raised.value).startswith("Schedule"), str(raised.value)
    with pytest.raises(CronScheduleError, match="actor 'report'") as raised, of_actor("report"):
        Schedule("0 3 * * *", **{option: value})
    assert wanted in str(raised.value)


@pytest.mark.parametrize(
    ("argument", "value", "wanted"),
    [
        ("grace", "60s", "grace must be a non-negative int of ms, got '60s'"),
        ("failure_threshold", 0, "failure_threshold must be a positive int, got 0"),
        ("run_history", 0, "run_history must be a positive int, got 0"),
        ("on_alert", "print", "on_alert must be None or a callable, got 'print'"),
        ("alert_for", -1, "alert_for must be a non-negative int of ms, got -1"),
        (
            "alert_webhook",
            "ftp://u:secret@x/",
            "alert_webhook must be None or an http:// or https:// URL, got 'ftp://***@x/'",
        ),
    ],
)
def test_a_bad_middleware_argument_names_the_argument_and_the_value(argument: str, value: object, wanted: str) -> None:
    with pytest.raises(CronConfigurationError) as raised:
        CronMiddleware(**{argument: value})  # type: ignore[arg-type]
    assert wanted in str(raised.value) and "secret" not in str(raised.value)


def test_a_schedules_thresholds_override_the_middlewares_and_max_runtime_follows_the_time_limit() -> None:
    broker = StubBroker(middleware=[TimeLimit(time_limit=120_000)])
    cron = CronMiddleware(grace=30_000, failure_threshold=3)
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="plain", broker=broker, cron="0 3 * * *")
    dramatiq.actor(
        lambda: None,
        actor_name="own",
        broker=broker,
        time_limit=5_000,
        cron=Schedule("0 4 * * *", grace=1_000, failure_threshold=1),
    )
    plain, own = cron.all_schedules()
    held = {"alert_for_ms": 60_000}
    assert cron.health_policy(plain) == Policy(grace_ms=30_000, max_runtime_ms=125_000, failure_threshold=3, **held)
    assert cron.health_policy(own) == Policy(grace_ms=1_000, max_runtime_ms=10_000, failure_threshold=1, **held)
