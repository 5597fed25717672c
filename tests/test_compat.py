"""The migration shims run the peers' own documented examples with only the
import changed (docs/migration.md).

The examples below are quoted from the peers' READMEs (dramatiq-crontab
1.2.1's "Usage" and "Interval" sections, periodiq 0.14.0's "Installation"
section), as data: the test changes their import line and nothing else,
and gives them the ``broker`` their READMEs take for granted.  The ticks
are judged with the simulator (the leader's own code on a fake clock).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator

import dramatiq
import dramatiq.broker
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, CronScheduleError
from dramatiq_cron_middleware.testing import CronSimulator, ticks_between

CRONTAB_USAGE = """\
# tasks.py
import dramatiq
from dramatiq_crontab import cron


@cron("*/5 * * * *")  # every 5 minutes
@dramatiq.actor
def my_task():
    my_task.logger.info("Hello World")
"""

CRONTAB_INTERVAL = """\
# tasks.py
import dramatiq
from dramatiq_crontab import interval


@interval(seconds=30)
@dramatiq.actor
def my_task():
    my_task.logger.info("Hello World")
"""

PERIODIQ = """\
# filename: app.py

import dramatiq
from periodiq import PeriodiqMiddleware, cron

broker.add_middleware(PeriodiqMiddleware(skip_delay=30))

@dramatiq.actor(periodic=cron('0 * * * *'))
def hourly():
    # Do something each hour\u2026
    ...
"""

IMPORTS = {
    "from dramatiq_crontab import": "from dramatiq_cron_middleware.compat.crontab import",
    "from periodiq import": "from dramatiq_cron_middleware.compat.periodiq import",
}
START = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def migrated(example: str) -> str:
    """The example with its import changed, and nothing else."""
    changed = example
    for old, new in IMPORTS.items():
        changed = changed.replace(old, new)
    assert changed != example and len(changed.splitlines()) == len(example.splitlines())
    return changed


@pytest.fixture
def stub_broker() -> Iterator[StubBroker]:
    previous = dramatiq.broker.global_broker
    broker = StubBroker()
    dramatiq.set_broker(broker)
    try:
        yield broker
    finally:
        broker.close()
        dramatiq.broker.global_broker = previous


def _run(example: str, broker: StubBroker) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "peer_example", "broker": broker}
    exec(compile(migrated(example), "peer_example", "exec"), namespace)
    return namespace


def _ticks_around_a_deploy(broker: StubBroker) -> list[str]:
    """From 00:00 to 03:30, nobody leading from 01:59 to 02:01 (a deploy):
    the ticks enqueued."""
    sim = CronSimulator(broker, now=START)
    sim.advance(to=START + dt.timedelta(hours=1, minutes=59))
    sim.advance(by=dt.timedelta(minutes=2), leading=False)
    sim.advance(to=START + dt.timedelta(hours=3, minutes=30))
    return _enqueued_ticks(broker)


def _enqueued_ticks(broker: StubBroker) -> list[str]:
    """The hh:mm of each tick enqueued on the default queue, in order."""
    queue = broker.queues["default"]
    ticks = []
    while not queue.empty():
        ticks.append(dramatiq.Message.decode(queue.get_nowait()).options["cron_tick"][11:16])
    return ticks


@pytest.mark.parametrize(
    ("example", "every_ms"), [(CRONTAB_USAGE, 5 * 60_000), (CRONTAB_INTERVAL, 30_000)], ids=["cron", "interval"]
)
def test_dramatiq_crontabs_examples_run_with_only_the_import_changed(
    stub_broker: StubBroker, example: str, every_ms: int
) -> None:
    """Given a broker with CronMiddleware, When dramatiq-crontab's README
    example runs with its import changed, Then the actor is scheduled as the
    example says: one message per period, for that actor."""
    stub_broker.add_middleware(CronMiddleware())
    _run(example, stub_broker)
    messages = ticks_between(stub_broker, START, START + dt.timedelta(hours=1))
    assert {m.actor_name for m in messages} == {"my_task"}
    assert len(messages) == 3_600_000 // every_ms
    ticks = [dt.datetime.fromisoformat(m.options["cron_tick"]) for m in messages]
    assert all((b - a) == dt.timedelta(milliseconds=every_ms) for a, b in itertools.pairwise(ticks))


def test_periodiqs_example_runs_with_only_the_import_changed_and_keeps_periodiqs_behaviour(
    stub_broker: StubBroker,
) -> None:
    """Given periodiq's README example with its import changed, Then its
    actor fires each hour, its messages are dropped after skip_delay (30 s),
    and ticks missed while nobody led are not sent afterwards (as periodiq)."""
    _run(PERIODIQ, stub_broker)
    messages = ticks_between(stub_broker, START, START + dt.timedelta(hours=3))
    assert [m.options["cron_tick"][11:16] for m in messages] == ["01:00", "02:00", "03:00"]
    assert {m.options["max_age"] for m in messages} == {30_000}

    assert _ticks_around_a_deploy(stub_broker) == ["01:00", "03:00"]  # 02:00 fell in the deploy


def test_periodiq_shim_can_catch_up_like_cronmiddleware(stub_broker: StubBroker) -> None:
    from dramatiq_cron_middleware.compat.periodiq import PeriodiqMiddleware, cron

    stub_broker.add_middleware(PeriodiqMiddleware(catch_up="each"))

    @dramatiq.actor(periodic=cron("@hourly"))
    def hourly() -> None: ...

    assert _ticks_around_a_deploy(stub_broker) == ["01:00", "02:00", "03:00"]  # 02:00 caught up


def test_the_shims_name_the_actor_and_the_mistake(stub_broker: StubBroker) -> None:
    from dramatiq_cron_middleware.compat import crontab, periodiq

    @dramatiq.actor
    def plain() -> None: ...

    with pytest.raises(Exception, match="plain"):  # no CronMiddleware on the broker
        crontab.cron("* * * * *")(plain)
    stub_broker.add_middleware(periodiq.PeriodiqMiddleware())
    with pytest.raises(CronScheduleError, match=r"put it above @dramatiq\.actor"):
        crontab.cron("* * * * *")(lambda: None)  # type: ignore[type-var]
    with pytest.raises(CronScheduleError, match=r"actor 'late'.*61"):

        @crontab.cron("61 * * * *")
        @dramatiq.actor
        def late() -> None: ...

    with pytest.raises(CronScheduleError, match="actor 'both'"):

        @dramatiq.actor(periodic=periodiq.cron("@daily"), cron="@daily")
        def both() -> None: ...
