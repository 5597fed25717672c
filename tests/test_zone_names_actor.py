"""A zone this machine's tz database lacks, given in a ``Schedule`` built on
its own, is refused where the Schedule meets its actor, naming both (issue
30): the decorator's ``cron=Schedule(...)``, an entry of a ``cron=`` list,
the Python API's ``add``/``update`` and the CLI's ``add``.  A value that can
be no zone name at all (not a string, a path) is still refused at once,
when the Schedule is built."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, CronScheduleError, Schedule
from dramatiq_cron_middleware.testing import CronSimulator
from tests.support.command import dramatiq_cron
from tests.support.redis_server import RedisServer

BAD = "Mars/Base"
SAYS = "cron '0 * * * *': unknown time zone 'Mars/Base'"


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(redis="redis://127.0.0.1:1"))
    dramatiq.set_broker(broker)
    yield broker
    broker.close()


def test_the_decorator_names_the_actor_of_a_schedule_with_an_unknown_zone(broker: StubBroker) -> None:
    with pytest.raises(CronScheduleError) as caught:

        @dramatiq.actor(cron=Schedule("0 * * * *", timezone=BAD))
        def nightly_report() -> None: ...

    assert str(caught.value) == f"actor 'nightly_report', {SAYS}"


def test_an_entry_of_a_cron_list_names_its_actor(broker: StubBroker) -> None:
    with pytest.raises(CronScheduleError) as caught:

        @dramatiq.actor(cron=["30 * * * *", Schedule("0 * * * *", name="hourly", timezone=BAD)])
        def nightly_report() -> None: ...

    assert str(caught.value) == f"actor 'nightly_report', {SAYS}"


def test_the_api_names_the_actor_on_add_and_update(broker: StubBroker) -> None:
    @dramatiq.actor
    def report() -> None: ...

    cron = CronMiddleware.of(broker)
    simulator = CronSimulator(broker, now=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
    try:
        with pytest.raises(CronScheduleError) as caught:
            cron.add("report", Schedule("0 * * * *", timezone=BAD), name="x")
        assert str(caught.value) == f"actor 'report', {SAYS}"
        cron.add("report", "0 * * * *", name="x")
        with pytest.raises(CronScheduleError) as caught:
            cron.update("report:x", timezone=BAD)
        assert str(caught.value) == f"actor 'report', {SAYS}"
    finally:
        simulator.close()


def test_the_cli_names_the_actor() -> None:
    server = RedisServer().start()
    try:
        env = {"DRAMATIQ_CRON_REDIS_URL": f"redis://127.0.0.1:{server.port}/0", "CRON_APP_BROKER": "stub"}
        add = ["add", "tests.apps.cronapp", "tick_0", "0 * * * *", "--timezone", BAD, "--name", "x"]
        result = dramatiq_cron(env, *add)
        said = f"dramatiq-cron: error: actor 'tick_0', {SAYS}"
        assert (result.returncode, result.stderr.strip()) == (2, said), result
    finally:
        server.close()


@pytest.mark.parametrize(("zone", "says"), [(3, "got 3"), ("../etc/passwd", "unknown time zone '../etc/passwd'")])
def test_a_value_that_is_no_zone_name_is_refused_when_the_schedule_is_built(zone: object, says: str) -> None:
    with pytest.raises(CronScheduleError) as caught:
        Schedule("0 * * * *", timezone=zone)  # type: ignore[arg-type]
    assert str(caught.value).startswith("Schedule, cron '0 * * * *': ") and says in str(caught.value)


def test_a_schedule_with_an_unknown_zone_can_be_built_and_is_refused_when_bound() -> None:
    # Built on its own, it knows no actor: binding is the earliest moment
    # the error can name one.
    assert Schedule("0 * * * *", timezone=BAD).timezone == BAD
