"""``dramatiq-cron status`` and the dashboard's overview say the same about
the same state: one rule set decides the problems (``status.py``), and the
health is counted over every schedule, however many runtime ones there are.

Before, only the dashboard warned about an evicting ``maxmemory-policy``
and about no candidate at all, and the command counted the health of the
first 10,000 runtime schedules only."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.monitoring.health import Facts
from dramatiq_cron_middleware.web import CronDashboard
from tests.support.command import dramatiq_cron
from tests.support.redis_server import RedisServer
from tests.support.wsgi import Browser

pytest.importorskip("jinja2")

APP = "tests.apps.cronapp"
#: One more runtime schedule than the command used to read.
RUNTIME = 10_001
#: The runtime schedule listed last (ids list in order), in trouble.
LAST = "zz-failing"


@pytest.fixture
def state(redis_server: RedisServer) -> Iterator[tuple[RedisServer, CronMiddleware, StubBroker]]:
    """The state of tests/apps/cronapp (``tick_0`` every second) with no
    process running, an evicting Redis, and 10,001 runtime schedules, the
    last of which the leader had found failing."""
    broker = StubBroker()
    middleware = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda *a, **k: None, actor_name="tick_0", broker=broker, cron="* * * * * *")
    hourly = Schedule(every=3_600_000)
    names = [f"r{i:05d}" for i in range(RUNTIME - 1)] + [LAST]
    middleware.add_many([("tick_0", hourly, name) for name in names])
    client = redis_server.client()
    client.hset(middleware.keys.health, f"tick_0:{LAST}", Facts(health="failing", fails=3).dumps())
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield redis_server, middleware, broker
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        broker.close()


def dashboard_overview(broker: StubBroker) -> tuple[list[str], dict[str, int]]:
    """The overview's warnings and health counts."""
    page = Browser(CronDashboard(broker, unauthenticated=True)).get("/cron/")
    assert page.status == 200, page.text
    warnings = [html.unescape(w) for w in re.findall(r'class="warning" role="alert">(?:<p>)?([^<]+)', page.text)]
    counts_html = page.text[page.text.index('id="health-counts"') :]
    counts_html = counts_html[: counts_html.index("</dl>")]
    counts = {
        state.replace(" ", "_"): int(n)
        for state, n in re.findall(r"<dt>([^<]+)</dt><dd><a [^>]*>(\d+)</a></dd>", counts_html)
    }
    return warnings, counts


@pytest.mark.slow
def test_status_and_the_overview_report_the_same_problems_and_count_every_schedule(
    state: tuple[RedisServer, CronMiddleware, StubBroker],
) -> None:
    """Given no process, an allkeys eviction policy and 10,001 runtime
    schedules (the last one failing), When an operator runs ``status`` and
    opens the overview, Then both warn about the eviction policy and the
    missing candidates alike, and both count the health of all 10,002
    schedules, the failing one included."""
    server, _, broker = state
    env = {"DRAMATIQ_CRON_REDIS_URL": server.url}
    warnings, counts = dashboard_overview(broker)

    result = dramatiq_cron(env, "status", APP, "--json")
    assert result.returncode == 1, result.stderr  # no leader
    data = json.loads(result.stdout)
    assert sorted(p["text"] for p in data["problems"]) == sorted(warnings)
    assert {p["kind"] for p in data["problems"]} >= {"no_leader", "no_candidate", "eviction_policy"}
    assert data["health"] == counts
    assert sum(counts.values()) == 1 + RUNTIME and counts.get("failing") == 1

    text = dramatiq_cron(env, "status", APP).stdout
    assert "maxmemory-policy is allkeys-lru" in text and "No candidate was seen recently" in text, text
    assert "1 failing" in text, text


def test_check_and_the_dashboards_health_report_the_same_stored_definitions(redis_server: RedisServer) -> None:
    """Given a runtime schedule whose stored expression this version cannot
    read (written under other rules) and one it reads differently, When a
    probe asks ``/health`` and an operator runs ``check``, Then both list
    the same two stored definitions and both say critical (503, exit 2).
    Before, only ``check`` read the stored definitions again."""
    broker = StubBroker()
    middleware = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda *a, **k: None, actor_name="tick_0", broker=broker, cron="0 3 * * *")
    for name in ("good", "february", "quarterly"):
        middleware.add("tick_0", "0 3 * * *", name=name)
    client = redis_server.client()
    for schedule_id, expression in (("tick_0:february", "0 0 31 2 0"), ("tick_0:quarterly", "59/15 * * * *")):
        definition = json.loads(client.hget(middleware.keys.runtime, schedule_id) or "{}")
        client.hset(middleware.keys.runtime, schedule_id, json.dumps({**definition, "expression": expression}))
    try:
        reply = Browser(CronDashboard(broker, unauthenticated=True)).get("/cron/health")
        checked = dramatiq_cron({"DRAMATIQ_CRON_REDIS_URL": redis_server.url}, "check", APP, "--json")
        assert checked.returncode == 2, checked.stderr
        stored = json.loads(checked.stdout)["stored"]
        assert sorted(p["id"] for p in stored) == ["tick_0:february", "tick_0:quarterly"]
        assert (reply.status, json.loads(reply.text)["stored"]) == (503, stored)
    finally:
        broker.close()
