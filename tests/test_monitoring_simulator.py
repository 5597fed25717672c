"""``testing.CronSimulator`` reports runs and health on its fake clock, so an
app can test its thresholds (no Redis, no waiting)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.monitoring import Alert
from dramatiq_cron_middleware.testing import CronSimulator, running_worker

START = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


class App:
    def __init__(self) -> None:
        self.broker = StubBroker()
        self.alerts: list[Alert] = []
        self.broken = True
        self.broker.add_middleware(
            CronMiddleware(grace=60_000, failure_threshold=2, on_alert=self.alerts.append, alert_for=0)
        )

        @dramatiq.actor(broker=self.broker, cron="0 * * * *", max_retries=0)
        def report() -> None:
            if self.broken:
                raise RuntimeError("report failed")

        self.simulator = CronSimulator(self.broker, now=START)

    def hour(self) -> None:
        """An hour passes and the worker runs what fell due."""
        self.simulator.advance(by=dt.timedelta(hours=1))
        with running_worker(self.broker, worker_timeout=20) as worker:
            self.broker.join("default", fail_fast=False)
            worker.join()


@pytest.fixture
def app() -> Iterator[App]:
    made = App()
    yield made
    made.simulator.close()


def test_the_simulator_reports_failing_runs_and_recovery_with_the_alerts(app: App) -> None:
    assert app.simulator.health() == {"report": "pending"}
    app.hour()
    assert app.simulator.health() == {"report": "ok"}  # one failure: below the threshold
    app.hour()
    assert app.simulator.health() == {"report": "failing"}
    runs = app.simulator.runs("report")
    assert [r.outcome for r in runs] == ["failed", "failed"]
    assert runs[0].tick_ms == int((START + dt.timedelta(hours=2)).timestamp() * 1000)
    assert runs[0].error == "RuntimeError: report failed"
    app.broken = False
    app.hour()
    assert app.simulator.health() == {"report": "ok"}
    assert [(a.previous, a.state) for a in app.alerts] == [("ok", "failing"), ("failing", "ok")]
    assert app.simulator.alerts == app.alerts


def test_a_tick_nobody_runs_within_grace_is_late_on_the_fake_clock(app: App) -> None:
    app.simulator.advance(by=dt.timedelta(hours=1))  # fired; no worker runs it
    assert app.simulator.health() == {"report": "pending"}
    app.simulator.advance(by=dt.timedelta(seconds=61))
    assert app.simulator.health() == {"report": "late"}
    assert [r.outcome for r in app.simulator.runs("report")] == ["pending"]


def test_runs_and_health_read_while_the_worker_still_runs_show_what_it_recorded(app: App) -> None:
    """The run records are written from a thread of their own (the run
    recorder's sink): the simulator's reads wait for what the workers'
    hooks recorded so far, so a test reading inside ``running_worker``
    sees its runs without waiting."""
    app.simulator.advance(by=dt.timedelta(hours=1))
    with running_worker(app.broker, worker_timeout=20) as worker:
        app.broker.join("default", fail_fast=False)
        worker.join()
        assert [r.outcome for r in app.simulator.runs("report")] == ["failed"]
        assert app.simulator.health() == {"report": "ok"}  # one failure: below the threshold
