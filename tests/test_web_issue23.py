"""The dashboard's part of issue 23, as a WSGI application against a real
redis-server: descriptions (escaped on every page), pauses that end by
themselves (the "for" field, the time left), processes not eligible to
lead, and one-shots."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.web import CronDashboard
from tests.support.instances import now_ms, wait_for
from tests.support.redis_server import RedisServer
from tests.support.wsgi import Browser

pytest.importorskip("jinja2")

EVIL = "<script>alert(1)</script>&<b>"
KEYS = "{dramatiq-cron}"


@dataclass
class App:
    broker: RedisBroker
    middleware: CronMiddleware
    browser: Browser


@pytest.fixture
def app(redis_server: RedisServer) -> Iterator[App]:
    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=1000)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="report", broker=broker, cron=Schedule("0 9 * * *", description=EVIL))
    dramatiq.actor(lambda: None, actor_name="plain", broker=broker)
    try:
        yield App(broker, middleware, Browser(CronDashboard(broker, prefix="", unauthenticated=True)))
    finally:
        broker.close()


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


def test_a_description_carrying_markup_is_escaped_on_every_page(app: App) -> None:
    """Given a declared and a runtime schedule whose descriptions carry
    markup, Then every page shows them as text, never as markup."""
    app.middleware.add("plain", "*/5 * * * *", name="nightly", description=EVIL)
    pages = ["/", "/schedules", "/schedule?id=report", "/schedule?id=plain:nightly", "/schedules?q=plain"]
    for path in pages:
        reply = app.browser.request("GET", path)
        assert reply.status == 200, path
        assert "<script>alert(1)" not in reply.text and "&<b>" not in reply.text, path
    shown = app.browser.request("GET", "/schedules").text
    assert shown.count(html.escape(EVIL)) == 2
    assert html.escape(EVIL) in app.browser.request("GET", "/schedule?id=plain:nightly").text


def test_a_pause_for_two_hours_from_the_dashboard_shows_the_time_left(app: App, redis_server: RedisServer) -> None:
    page = app.browser.request("GET", "/schedules").text
    assert 'name="for"' in page
    reply = app.browser.request("POST", "/pause", form={"csrf": csrf_of(page), "schedule": "report", "for": "2h"})
    assert reply.status == 303
    until = int(redis_server.client().hget(f"{KEYS}:paused:until", "report") or 0)
    assert 7_190_000 < until - now_ms() <= 7_200_000
    row = re.search(r'<tr data-schedule="report">.*?</tr>', app.browser.request("GET", "/schedules").text, re.S)
    assert row and "until" in row.group(0) and re.search(r"1h5\dm left", row.group(0))

    bad = app.browser.request("POST", "/pause", form={"csrf": csrf_of(page), "schedule": "report", "for": "2 hours"})
    assert bad.status == 400 and "cannot read &#39;2 hours&#39; as a duration" in bad.text


def test_processes_not_eligible_to_lead_are_listed_and_their_lone_survival_warned(
    app: App, redis_server: RedisServer
) -> None:
    client = redis_server.client()
    # Seen a minute ahead of Redis's clock: live however long the page
    # takes to be asked for and built on a loaded machine (the window is
    # two one-second leases).
    now = int(client.time()[0]) * 1000 + 60_000
    client.zadd(f"{KEYS}:ineligible", {"spot-1|4242|abc": now})
    page = app.browser.request("GET", "/").text
    assert 'id="ineligible"' in page and "4242" in page and "not eligible" in page
    assert "No process eligible to lead was seen" in page
    client.zadd(f"{KEYS}:candidates", {"host|1|xyz": now})
    assert "No process eligible to lead was seen" not in app.browser.request("GET", "/").text


def test_a_decided_one_shot_shows_as_done(app: App, redis_server: RedisServer) -> None:
    stored = app.middleware.add("plain", at=now_ms() + 300, name="done")
    at = stored.schedule.at
    assert at is not None
    wait_for(lambda: now_ms() > at, timeout=30, what="the one-shot's instant to pass")
    redis_server.client().hset(f"{KEYS}:ticks", "plain:done", f"{stored.schedule.at}:1:1")  # as a leader's fire
    row = re.search(r'<tr data-schedule="plain:done">.*?</tr>', app.browser.request("GET", "/schedules").text, re.S)
    assert row and 'class="badge done">done<' in row.group(0)


def test_a_one_shot_is_listed_in_words_and_removable(app: App) -> None:
    app.middleware.add("plain", at=now_ms() + 3_600_000, name="once")
    page = app.browser.request("GET", "/schedules").text
    row = re.search(r'<tr data-schedule="plain:once">.*?</tr>', page, re.S)
    assert row and "Once, at" in row.group(0) and 'data-action="remove"' in row.group(0)
    reply = app.browser.request("POST", "/runtime/remove", form={"csrf": csrf_of(page), "id": "plain:once"})
    assert reply.status == 303 and app.middleware.runtime.get("plain", "once") is None
