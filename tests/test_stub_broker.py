"""dramatiq's ordinary test pattern keeps working once the middleware is
added (issue 18, item 7): a ``StubBroker`` with no Redis configured runs
its worker with the scheduler off (one INFO line says so and how to test
schedules), and runtime-schedule calls go to an attached ``CronSimulator``
or fail with an error naming the fix."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.errors import CronConfigurationError
from dramatiq_cron_middleware.store.connection import ENV_URL
from dramatiq_cron_middleware.testing import CronSimulator, running_worker
from tests.support.instances import ROOT, stop_group, wait_for

UTC = dt.timezone.utc
T0 = dt.datetime(2030, 1, 1, 0, 0, tzinfo=UTC)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubBroker]:
    """A user's app as its tests build it: a StubBroker, the middleware, a
    cron actor and a plain one, and no Redis anywhere."""
    monkeypatch.delenv(ENV_URL, raising=False)
    broker = StubBroker()
    broker.add_middleware(CronMiddleware())
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


def scheduler_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("dramatiq_cron_middleware") and r.levelno >= logging.INFO]


def test_a_worker_on_a_stub_broker_runs_the_apps_actors_with_the_scheduler_off(
    broker: StubBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a StubBroker with the middleware and no Redis, When the tests
    start and stop workers, Then the actors run, and one INFO line says the
    scheduler is off and how to test schedules."""
    caplog.set_level(logging.DEBUG)
    done: list[int] = []

    @dramatiq.actor(cron="*/5 * * * *")
    def cleanup() -> None: ...

    @dramatiq.actor
    def add(x: int) -> None:
        done.append(x)

    for round_ in range(2):
        with running_worker(broker, worker_timeout=50) as worker:
            add.send(round_)
            broker.join(add.queue_name)
            worker.join()
    assert done == [0, 1]
    [line] = scheduler_lines(caplog)
    assert line.levelno == logging.INFO
    text = line.getMessage()
    assert "StubBroker" in text and "CronSimulator" in text and "off" in text
    assert CronMiddleware.of(broker).leader is None


def test_runtime_calls_without_redis_name_the_fix(broker: StubBroker) -> None:
    @dramatiq.actor
    def send_report(tenant_id: int = 0) -> None: ...

    cron = CronMiddleware.of(broker)
    for call in (
        lambda: cron.add(send_report, "0 9 * * *", name="tenant-1"),
        lambda: cron.remove(send_report, "tenant-1"),
        lambda: cron.list(),
    ):
        with pytest.raises(CronConfigurationError) as refused:
            call()
        assert "CronSimulator" in str(refused.value) and "redis=" in str(refused.value)


def test_runtime_calls_go_to_an_attached_simulator_which_fires_them(broker: StubBroker) -> None:
    ran: list[int] = []

    @dramatiq.actor
    def send_report(tenant_id: int = 0) -> None:
        ran.append(tenant_id)

    simulator = CronSimulator(broker, now=T0)
    cron = CronMiddleware.of(broker)
    stored = cron.add(send_report, Schedule("0 9 * * *", kwargs={"tenant_id": 42}), name="tenant-42")
    assert stored.id == "send_report:tenant-42" and stored.next_ms == int(
        (T0 + dt.timedelta(hours=9)).timestamp() * 1000
    )
    cron.add("send_report", "0 10 * * *", name="tenant-7")
    page = cron.list(actor=send_report)
    assert [r.id for r in page.items] == ["send_report:tenant-42", "send_report:tenant-7"] and page.total == 2
    assert cron.remove(send_report, "tenant-7") is True
    assert cron.remove(send_report, "tenant-7") is False

    with running_worker(broker, worker_timeout=50) as worker:
        sent = simulator.advance(by=dt.timedelta(days=2))
        broker.join(send_report.queue_name)
        worker.join()
    assert [m.options["cron_tick"] for m in sent] == ["2030-01-01T09:00:00+00:00", "2030-01-02T09:00:00+00:00"]
    assert ran == [42, 42]
    simulator.close()
    with pytest.raises(CronConfigurationError, match="CronSimulator"):
        cron.list()


def test_a_malformed_redis_url_still_fails_at_boot() -> None:
    broker = StubBroker()
    broker.add_middleware(CronMiddleware(redis="redis://localhost:notaport/0"))
    try:
        with pytest.raises(CronConfigurationError), running_worker(broker, worker_timeout=50):
            pass
    finally:
        broker.close()


@pytest.mark.slow
def test_a_dramatiq_process_on_a_stub_broker_without_redis_runs_its_actors(tmp_path: Path) -> None:
    """The same under a real ``dramatiq`` process: it boots, runs an actor,
    logs the scheduler-off line once per worker process, and stops on
    SIGTERM with status 0."""
    ran = tmp_path / "ran"
    (tmp_path / "stubapp.py").write_text(
        "import pathlib\n"
        "import dramatiq\n"
        "from dramatiq.brokers.stub import StubBroker\n"
        "from dramatiq_cron_middleware import CronMiddleware\n"
        "broker = StubBroker()\n"
        "broker.add_middleware(CronMiddleware())\n"
        "dramatiq.set_broker(broker)\n"
        "@dramatiq.actor(cron='*/5 * * * *')\n"
        "def cleanup():\n    pass\n"
        "@dramatiq.actor\n"
        f"def mark():\n    pathlib.Path({str(ran)!r}).write_text('yes')\n"
        "mark.send()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_URL}
    log = tmp_path / "log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                os.path.join(os.path.dirname(sys.executable), "dramatiq"),
                "stubapp",
                "--processes",
                "1",
                "--threads",
                "1",
            ],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(ran.exists, timeout=30, what="the actor to run")
        wait_for(lambda: "Cron scheduler off" in log.read_text(), timeout=60, what="the scheduler-off line")
        proc.send_signal(15)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        stop_group(proc, grace=5)
    text = log.read_text()
    assert text.count("Cron scheduler off") == 1, text
    assert "Traceback" not in text and "CRITICAL" not in text, text
