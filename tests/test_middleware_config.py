"""The middleware's configuration is one checked value, finding the
middleware on a broker is one function, and resolving the scheduler's
Redis is one method: every integration (CLI, dashboard, dedup, metrics,
testing) goes through them."""

from __future__ import annotations

import dataclasses

import pytest
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronConfigurationError, CronMiddleware, find_middleware
from dramatiq_cron_middleware.config import CronConfig
from dramatiq_cron_middleware.testing import cron_middleware_of


@pytest.mark.parametrize(
    ("argument", "value", "wanted"),
    [
        ("lock_ttl", 299, "an int of at least 300 ms"),
        ("lock_ttl", True, "an int of at least 300 ms"),
        ("catch_up", "all", "'each', 'latest' or 'none'"),
        ("catch_up_window", -1, "a non-negative int of ms"),
        ("prefix", "a{b}", "a non-empty string without braces"),
        ("history_length", 0, "a positive int"),
        ("fast_takeover", 49, "None or an int of at least 50 ms"),
        ("app_version", "a|b", "a string of at most 100 characters without '|'"),
    ],
)
def test_a_bad_argument_is_named_with_its_value(argument: str, value: object, wanted: str) -> None:
    with pytest.raises(CronConfigurationError) as raised:
        CronMiddleware(**{argument: value})  # type: ignore[arg-type]
    assert str(raised.value) == f"CronMiddleware: {argument} must be {wanted}, got {value!r}"


def test_the_configuration_is_one_frozen_value_read_through_the_middleware() -> None:
    middleware = CronMiddleware(lock_ttl=3000, prefix="app")
    assert isinstance(middleware.config, CronConfig)
    assert (middleware.lock_ttl, middleware.prefix, middleware.keys.prefix) == (3000, "app", "app")
    with pytest.raises(dataclasses.FrozenInstanceError):
        middleware.config.lock_ttl = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        middleware.lock_ttl = 1  # type: ignore[misc]


def test_the_app_version_defaults_to_the_environment_read_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAMATIQ_CRON_APP_VERSION", "v" * 120)
    middleware = CronMiddleware()
    monkeypatch.setenv("DRAMATIQ_CRON_APP_VERSION", "later")
    assert middleware.config.version == "v" * 100
    assert CronMiddleware(app_version="given").config.version == "given"


def test_find_middleware_returns_the_one_on_the_broker_and_every_alias_agrees() -> None:
    broker = StubBroker()
    middleware = CronMiddleware()
    broker.add_middleware(middleware)
    assert find_middleware(broker) is middleware
    assert CronMiddleware.of(broker) is middleware
    assert cron_middleware_of(broker) is middleware


def test_find_middleware_on_a_broker_without_one_names_the_broker_and_who_needs_it() -> None:
    broker = StubBroker()
    with pytest.raises(CronConfigurationError, match=r"^the broker \(StubBroker\) has no CronMiddleware$"):
        find_middleware(broker)
    needs = r"^CronMetrics needs a CronMiddleware, and the broker \(StubBroker\) has none$"
    with pytest.raises(CronConfigurationError, match=needs):
        find_middleware(broker, needed_by="CronMetrics")


def test_the_redis_source_is_the_argument_then_the_environment_then_a_redis_brokers_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DRAMATIQ_CRON_REDIS_URL", raising=False)
    redis_broker = RedisBroker(url="redis://127.0.0.1:1/0")
    assert CronMiddleware(redis="redis://given:1/0").redis_source(redis_broker) == "redis://given:1/0"
    assert CronMiddleware().redis_source(redis_broker) is redis_broker.client
    monkeypatch.setenv("DRAMATIQ_CRON_REDIS_URL", "redis://from-env:1/0")
    assert CronMiddleware().redis_source(redis_broker) == "redis://from-env:1/0"


def test_no_redis_anywhere_is_one_error_saying_where_to_configure_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRAMATIQ_CRON_REDIS_URL", raising=False)
    with pytest.raises(CronConfigurationError, match=r"no Redis configured.*the broker is StubBroker"):
        CronMiddleware().redis_source(StubBroker())


def test_a_misspelt_keyword_fails_at_once_naming_it() -> None:
    # Given the keywords as one TypedDict (config.CronOptions), then a
    # misspelt one still fails when the middleware is built, named.
    with pytest.raises(TypeError, match=r"^CronMiddleware\(\) got an unexpected keyword argument 'lock_tll'$"):
        CronMiddleware(lock_tll=3000)  # type: ignore[call-arg]


def test_every_documented_keyword_is_in_the_one_option_list_and_configures_the_middleware() -> None:
    # The class docstring's Parameters section, the option list and the
    # two configuration values name the same keywords.
    import re

    from dramatiq_cron_middleware.config import OPTIONS
    from dramatiq_cron_middleware.monitoring.config import MonitorConfig

    documented = set(re.findall(r"^      (\w+)\(", CronMiddleware.__doc__ or "", re.M))
    assert documented == OPTIONS
    fields = {f.name for f in dataclasses.fields(CronConfig) if f.init}
    assert fields | {f.name for f in dataclasses.fields(MonitorConfig)} == OPTIONS
    middleware = CronMiddleware(redis="redis://h:1/0", lock_ttl=900, grace=5, alert_for=0, one_shot_retention=7)
    assert (middleware.config.redis, middleware.config.lock_ttl, middleware.config.one_shot_retention) == (
        "redis://h:1/0",
        900,
        7,
    )
    assert (middleware.monitor_config.grace, middleware.monitor_config.alert_for) == (5, 0)
    assert middleware.timing.one_shot_retention_ms == 7
