"""Prometheus metrics of a running scheduler, scraped over HTTP.

The test app with :class:`CronMetrics` runs as a real ``dramatiq``
instance; the exposition is scraped until the metrics show the leader
deciding and firing ticks, and then until they move.
"""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from prometheus_client.parser import text_string_to_metric_families

from dramatiq_cron_middleware import CronMiddleware, Schedule, find_middleware
from dramatiq_cron_middleware.metrics import ENV_DIR, CronMetrics
from dramatiq_cron_middleware.monitoring.records import HEALTH_STATES
from dramatiq_cron_middleware.schedules.planner import message_for
from dramatiq_cron_middleware.testing import CronSimulator, running_worker
from tests.support.instances import now_ms, wait_for
from tests.support.redis_server import RedisServer, free_port

SCHEDULE = "tick_0"


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition on ``port``, keyed by name and labels;
    empty while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def no_pid_label(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> list[str]:
    """The names of the samples that carry a ``pid`` label (a series per
    process, which a restart multiplies): there should be none."""
    return sorted({n for (n, ls) in samples if "pid" in dict(ls)})


@pytest.mark.parametrize("exposition", ["own", "dramatiq"])
def test_metrics_show_the_leader_and_move_as_ticks_fire(
    exposition: str, redis_server: RedisServer, app_env: dict[str, str], instances: Any, tmp_path: Any
) -> None:
    """Given a two-process instance exporting cron metrics (through its own
    exposition server, or through dramatiq's Prometheus middleware), Then
    exactly one process reports leading, leadership gained is counted,
    renewals and fire lags are observed, the last fire time is recent, and
    the fired-ticks counter keeps growing."""
    port = free_port()
    env = {**app_env}
    if exposition == "own":
        env.update(DRAMATIQ_CRON_METRICS_HOST="127.0.0.1", DRAMATIQ_CRON_METRICS_PORT=str(port))
    else:
        env.update(
            CRON_APP_DRAMATIQ_PROMETHEUS="1",
            dramatiq_prom_host="127.0.0.1",
            dramatiq_prom_port=str(port),
            dramatiq_prom_db=str(tmp_path / "prom"),
        )
    instance = instances(env, processes=2, app="tests.apps.metricsapp")

    def fired() -> Any:
        # A tick is counted when decided, its lag observed once enqueued
        # (a moment later, on the leader thread): a scrape may fall between.
        samples = scrape(port)
        done = (
            value(samples, "dramatiq_cron_ticks_total", outcome="fired") >= 2
            and value(samples, "dramatiq_cron_fire_lag_seconds_count", schedule=SCHEDULE) >= 2
        )
        return samples if done else None

    samples = wait_for(fired, timeout=30, interval=0.2, what="fired ticks in the exposition")
    # One series for the instance, no pid label: its two processes sum to
    # one leader.
    assert [(n, ls) for (n, ls) in samples if n == "dramatiq_cron_leader"] == [("dramatiq_cron_leader", ())]
    assert value(samples, "dramatiq_cron_leader") == 1.0
    assert no_pid_label(samples) == []
    _, epoch = instance.leader_pids()[-1]
    assert value(samples, "dramatiq_cron_leadership_changes_total", change="gained") == 1
    # A single Redis: no replica is required, so no process lacks one.
    assert any(n == "dramatiq_cron_replicas_unconfirmed" for n, _ in samples)
    assert value(samples, "dramatiq_cron_replicas_unconfirmed") == 0
    assert value(samples, "dramatiq_cron_fire_lag_seconds_count", schedule=SCHEDULE) >= 2
    assert value(samples, "dramatiq_cron_fire_lag_seconds_bucket", schedule=SCHEDULE, le="+Inf") >= 2
    last_fire = value(samples, "dramatiq_cron_last_fire_timestamp_seconds", schedule=SCHEDULE)
    assert abs(last_fire * 1000 - now_ms()) < 10_000

    before = value(samples, "dramatiq_cron_ticks_total", outcome="fired")
    later = wait_for(
        lambda: (
            (s := scrape(port))
            and value(s, "dramatiq_cron_ticks_total", outcome="fired") >= before + 2
            and value(s, "dramatiq_cron_lease_renew_seconds_count") >= 1
            and s
        ),
        timeout=20,
        interval=0.2,
        what="the counters to move",
    )
    assert value(later, "dramatiq_cron_last_fire_timestamp_seconds", schedule=SCHEDULE) > last_fire
    assert epoch >= 1


def test_workers_count_runs_by_outcome_and_time_them(
    redis_server: RedisServer, app_env: dict[str, str], instances: Any
) -> None:
    """Given an instance whose cron actor ``tick_0`` succeeds and ``fails``
    raises at every tick, Then the exposition counts succeeded and failed
    runs per schedule, times them, stamps the last success of ``tick_0``
    only, and shows ``fails`` failing and ``tick_0`` ok, one state each."""
    port = free_port()
    env = {**app_env, "CRON_APP_FAILING": "1", "CRON_APP_HEALTH_INTERVAL": "300"}
    env.update(DRAMATIQ_CRON_METRICS_HOST="127.0.0.1", DRAMATIQ_CRON_METRICS_PORT=str(port))
    instances(env, processes=2, app="tests.apps.metricsapp")

    def ran() -> Any:
        samples = scrape(port)
        done = (
            value(samples, "dramatiq_cron_runs_total", schedule=SCHEDULE, outcome="succeeded") >= 2
            and value(samples, "dramatiq_cron_runs_total", schedule="fails", outcome="failed") >= 2
            and value(samples, "dramatiq_cron_health", schedule="fails", state="failing") == 1
            and value(samples, "dramatiq_cron_health", schedule=SCHEDULE, state="ok") == 1
        )
        return samples if done else None

    samples = wait_for(ran, timeout=30, interval=0.2, what="runs in the exposition")
    assert value(samples, "dramatiq_cron_runs_total", schedule="fails", outcome="succeeded") == 0
    assert value(samples, "dramatiq_cron_runs_total", schedule=SCHEDULE, outcome="failed") == 0
    assert value(samples, "dramatiq_cron_run_duration_seconds_count", schedule=SCHEDULE) >= 2
    assert value(samples, "dramatiq_cron_run_duration_seconds_count", schedule="fails") >= 2
    last_success = value(samples, "dramatiq_cron_last_success_timestamp_seconds", schedule=SCHEDULE)
    assert abs(last_success * 1000 - now_ms()) < 10_000
    assert value(samples, "dramatiq_cron_last_success_timestamp_seconds", schedule="fails") == 0
    # Each schedule is in one state; the others are 0, and only the leader exports them.
    for schedule in (SCHEDULE, "fails"):
        states = {
            dict(ls)["state"]: v
            for (n, ls), v in samples.items()
            if n == "dramatiq_cron_health" and dict(ls)["schedule"] == schedule
        }
        assert sorted(states) == sorted(HEALTH_STATES) and sum(states.values()) == 1, states


def test_an_attempt_is_retrying_until_dramatiq_gives_up_and_a_stale_message_is_dropped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Given a real Worker in this process, an actor that always raises with
    one retry, and a cron message older than its ``max_age``, Then the
    first attempt counts as ``retrying``, the second as ``failed`` (dramatiq's
    Retries decides after this middleware's hooks ran: the ack or nack
    says), and the stale message as ``dropped``."""
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    broker = StubBroker()
    broker.add_middleware(CronMiddleware())
    metrics = CronMetrics()
    broker.add_middleware(metrics)
    try:

        @dramatiq.actor(broker=broker, cron="0 * * * *", max_retries=1, min_backoff=10, max_backoff=20)
        def broken() -> None:
            raise RuntimeError("always")

        @dramatiq.actor(broker=broker, cron=Schedule("0 0 * * *", max_age=1000))
        def stale() -> None: ...

        broker.emit_after("process_boot")
        simulator = CronSimulator(broker, now=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
        schedule = next(s for s in find_middleware(broker).all_schedules() if s.actor_name == "stale")
        with running_worker(broker, worker_timeout=50) as worker:
            simulator.advance(by=dt.timedelta(minutes=90))  # one tick of broken
            broker.enqueue(message_for(schedule, 60_000, prefix="dramatiq-cron", timestamp_ms=60_000))
            broker.join("default", fail_fast=False, timeout=20_000)
            worker.join()
        assert metrics.runs is not None
        counted = {
            (dict(sample.labels)["schedule"], dict(sample.labels)["outcome"]): sample.value
            for family in metrics.runs.runs.collect()
            for sample in family.samples
            if sample.name == "dramatiq_cron_runs_total"
        }
        assert counted == {("broken", "retrying"): 1, ("broken", "failed"): 1, ("stale", "dropped"): 1}
    finally:
        broker.close()


def ones(health: Any) -> dict[str, list[str]]:
    """Per exported schedule, the states whose gauge is 1."""
    out: dict[str, list[str]] = {}
    for family in health.gauge.collect():
        for sample in family.samples:
            out.setdefault(sample.labels["schedule"], [])
            if sample.value == 1:
                out[sample.labels["schedule"]].append(sample.labels["state"])
    return out


def test_health_gauges_show_the_monitors_decisions_over_one_read_per_term(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The leader's health gauges (issue 29: no thread re-reading Redis):
    When a term begins, one read (as ``check`` reports) gives every
    schedule's state, retried while it fails with one WARNING per episode;
    Then the monitor's decisions win over it, a tick decided paused shows
    ``paused`` until the schedule fires again, a schedule the leader no
    longer has goes to 0, and losing the lead sets every state to 0.  No read happens but the one per term."""
    import logging

    from dramatiq_cron_middleware.metrics import _Health, _Runs
    from dramatiq_cron_middleware.monitoring.records import ScheduleHealth

    logger = logging.getLogger("test_health_gauges")
    reads: list[Any] = [
        RuntimeError("down"),
        [ScheduleHealth("a", "a", "a", "failing", 1, None), ScheduleHealth("b", "b", "b", "paused", 1, None)],
    ]
    read_count = [0]

    def read() -> list[ScheduleHealth]:
        read_count[0] += 1
        answer = reads.pop(0) if reads else [ScheduleHealth("a", "a", "a", "late", 3, None)]
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    health = _Health(read=read, runs=_Runs(), logger=logger, retry_s=0.01)
    health.lead(True)
    wait_for(lambda: ones(health) == {"a": ["failing"], "b": ["paused"]}, timeout=30, what="the term's read")
    assert read_count[0] == 2
    assert [r.getMessage() for r in caplog.records if r.name == "test_health_gauges"] == [
        "Cron health metrics cannot be read (RuntimeError: down).",
        "Cron health metrics are read again.",
    ]
    health.decided({"a": "ok", "c": "running_long"})
    assert ones(health) == {"a": ["ok"], "b": ["paused"], "c": ["running_long"]}
    health.paused("b", False)  # b fired: its own health (pending) again
    health.paused("a", True)
    assert ones(health) == {"a": ["paused"], "b": ["pending"], "c": ["running_long"]}
    # c and a runtime schedule are removed: once the leader no longer has
    # them, every state is 0 and the runtime counts drop them.
    health.decided({"r:x": "failing"})
    health.known, health.prune_s = (lambda: {"a", "b"}), 0
    health.decided({"a": "paused"})
    assert ones(health) == {"a": ["paused"], "b": ["pending"], "c": [], "r:x": []}
    assert {s.labels["state"]: s.value for f in health.runtime_gauge.collect() for s in f.samples}["failing"] == 0
    health.lead(False)
    assert ones(health) == {"a": [], "b": [], "c": [], "r:x": []}
    assert read_count[0] == 2  # the decisions are not read back from Redis
    # A next term reads once more.
    health.lead(True)
    wait_for(lambda: ones(health).get("a") == ["late"], timeout=30, what="the next term's read")
    assert read_count[0] == 3


def test_runtime_schedules_beyond_the_limit_are_counted_per_state_not_exported_one_by_one() -> None:
    """Given two declared schedules and three runtime ones, When the limit
    is 2 runtime schedules, Then the declared ones have their series, the
    runtime ones none (7 series for all of them instead of 7 each), and
    runtime_health counts them per state; under the limit every schedule
    has its series."""
    import logging

    from dramatiq_cron_middleware.metrics import _Health, _Runs

    logger = logging.getLogger("test_runtime_health")
    decided = {"report": "ok", "sync/fast": "late", **{f"send:t{n}": "failing" if n == 0 else "ok" for n in range(3)}}
    for limit, one_by_one in [
        (2, {"report": ["ok"], "sync/fast": ["late"]}),
        (3, {"report": ["ok"], "sync/fast": ["late"], "send:t0": ["failing"], "send:t1": ["ok"], "send:t2": ["ok"]}),
    ]:
        health = _Health(read=lambda: [], runs=_Runs(), logger=logger, runtime_limit=limit)
        for sid, state in decided.items():
            health.decided({sid: state})
        exported = {sid: states for sid, states in ones(health).items() if states}
        assert exported == one_by_one
        counts = {s.labels["state"]: s.value for f in health.runtime_gauge.collect() for s in f.samples}
        assert counts == {**dict.fromkeys(HEALTH_STATES, 0.0), "failing": 1.0, "ok": 2.0}
    with pytest.raises(Exception, match="runtime_health_limit"):
        CronMetrics(runtime_health_limit=-1)
