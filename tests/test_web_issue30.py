"""Issue 30's dashboard items, in-process against a real redis-server: the
404 page, paused schedules marked in Next, the words of a schedules row,
health freshness, and the audit lines of ``dramatiq-cron web``."""

from __future__ import annotations

import html

import pytest

from tests.support.dashboards import EVIL, DashboardApp, csrf_of, dashboard_app
from tests.support.redis_server import RedisServer

pytest.importorskip("jinja2")


@pytest.fixture
def app(redis_server: RedisServer) -> DashboardApp:
    return dashboard_app(redis_server)


# -- the 404 page -------------------------------------------------------------


def test_an_unknown_schedule_gets_the_sites_html_404_page_naming_the_id_escaped(app: DashboardApp) -> None:
    page = app.dashboard().get(f"/cron/schedule?id={EVIL}")
    assert page.status == 404
    assert (page.header("Content-Type") or "").startswith("text/html")
    assert "<h1>Not found</h1>" in page.text and 'href="/cron/static/dashboard.css"' in page.text
    assert EVIL not in page.text and html.escape(EVIL, quote=False) in page.text
    assert f"No schedule {EVIL} is declared, stored or recorded." in html.unescape(page.text)


def test_an_unknown_page_of_the_dashboard_is_the_html_404_page(app: DashboardApp) -> None:
    page = app.dashboard().get("/cron/nosuch")
    assert page.status == 404 and "<h1>Not found</h1>" in page.text


# -- paused schedules in Next -------------------------------------------------


def _row(page: str, schedule_id: str) -> str:
    start = page.index(f'<tr data-schedule="{html.escape(schedule_id)}"')
    return page[start : page.index("</tr>", start)]


def test_next_to_run_marks_a_paused_schedule_and_until_when(app: DashboardApp) -> None:
    """Given every_second paused for an hour and report/weekly not, When the
    operator opens Next to run, Then every_second's row says paused, until
    when, and that its run is skipped; report's row says nothing of a pause."""
    browser = app.dashboard()
    token = csrf_of(browser.get("/cron/schedules").text)
    assert browser.post("/cron/pause", {"csrf": token, "schedule": "every_second", "for": "1h"}).status == 303
    page = browser.get("/cron/next")
    assert page.status == 200
    paused = _row(page.text, "every_second")
    assert 'class="is-paused"' in paused and '<span class="badge paused">paused</span>' in paused
    assert "until <time" in paused and "left)" in paused and "this run is skipped" in paused
    running = _row(page.text, "report/weekly")
    assert "badge paused" not in running and "is-paused" not in running
