"""Prometheus metrics of a running scheduler, scraped over HTTP.

The test app with :class:`CronMetrics` runs as a real ``dramatiq``
instance; the exposition is scraped until the metrics show the leader
deciding and firing ticks, and then until they move.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

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


def leader_gauges(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {dict(ls)["pid"]: v for (n, ls), v in samples.items() if n == "dramatiq_cron_leader"}


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
        samples = scrape(port)
        return samples if value(samples, "dramatiq_cron_ticks_total", outcome="fired") >= 2 else None

    samples = wait_for(fired, timeout=30, interval=0.2, what="fired ticks in the exposition")
    gauges = leader_gauges(samples)
    leader_pid, epoch = instance.leader_pids()[-1]
    # One gauge per worker process (the exposition fork has none), and only
    # the leader's is 1.
    assert len(gauges) == 2 and set(gauges) <= {str(pid) for pid in instance.worker_pids()}, gauges
    assert {pid for pid, v in gauges.items() if v == 1.0} == {str(leader_pid)}, gauges
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
