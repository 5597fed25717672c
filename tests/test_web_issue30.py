"""Issue 30's dashboard items, in-process against a real redis-server: the
404 page, paused schedules marked in Next, the words of a schedules row,
health freshness, and the audit lines of ``dramatiq-cron web``."""

from __future__ import annotations

import html
import http.client
import os
import re
import subprocess
import sys
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

import pytest

from dramatiq_cron_middleware.web.health_pages import ReportCache
from tests.support.dashboards import EVIL, DashboardApp, csrf_of, dashboard_app
from tests.support.instances import ROOT, wait_for
from tests.support.redis_server import RedisServer, free_port
from tests.support.wsgi import basic

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


# -- the audit lines of dramatiq-cron web -------------------------------------


def test_dramatiq_cron_web_logs_every_action_at_info_in_dramatiqs_format(redis_server: RedisServer) -> None:
    """Given ``dramatiq-cron web`` on an app that configures no logging,
    When ops pauses a schedule, Then the server's stderr carries the audit
    line at INFO, in the dramatiq worker's format."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRAMATIQ_CRON_REDIS_URL": redis_server.url}
    command = [sys.executable, "-m", "dramatiq_cron_middleware", "web", "tests.apps.cronapp"]
    process = subprocess.Popen(
        [*command, "--bind", f"127.0.0.1:{port}", "--auth", "ops:pw"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = wait_for(process.stdout.readline, timeout=30, what="the dashboard to serve")
        assert "Serving the cron dashboard" in line, line
        headers = {"Host": f"127.0.0.1:{port}", **basic("ops", "pw")}
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/schedules", headers=headers)
        reply = connection.getresponse()
        page = reply.read().decode()
        cookie = SimpleCookie(reply.getheader("Set-Cookie") or "")
        form = urlencode({"csrf": csrf_of(page), "schedule": "tick_0"})
        connection.request(
            "POST",
            "/pause",
            body=form,
            headers={
                **headers,
                "Cookie": f"cron_csrf={cookie['cron_csrf'].value}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        assert connection.getresponse().status == 303
        connection.close()
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=30)
    audit = [line for line in errors.splitlines() if "tick_0" in line and "by ops" in line]
    assert len(audit) == 1, errors
    assert re.match(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[PID \d+\] \[[^]]+\] \[[\w.]+\] \[INFO\] Cron tick_0", audit[0])


# -- health freshness ---------------------------------------------------------


def test_the_kept_health_report_is_never_served_older_than_its_bound() -> None:
    """Given a report read at 0 s and no page for 61 s, When a page asks,
    Then the report is read again before it is served (not in the
    background after); and when that read fails, the stale report is not
    served either."""
    clock = [0.0]
    reads: list[float] = []
    jobs: list[Any] = []

    def read() -> Any:
        reads.append(clock[0])
        if len(reads) == 3:
            raise ConnectionError("down")
        return f"report {len(reads)}"

    cache = ReportCache(read, monotonic=lambda: clock[0], background=jobs.append, max_age_ms=60_000)
    assert cache.get() == "report 1"
    clock[0] = 59.0
    assert cache.get() == "report 1" and len(jobs) == 1  # young enough: served, read again behind
    jobs.clear()
    clock[0] = 61.0
    assert cache.get() == "report 2" and reads == [0.0, 61.0]
    clock[0] = 122.0
    with pytest.raises(ConnectionError):
        cache.get()


def test_the_overview_shows_when_its_health_was_read_and_how_long_ago(app: DashboardApp) -> None:
    page = app.dashboard().get("/cron/")
    assert page.status == 200
    match = re.search(
        r'<small id="health-age">as of <time datetime="[^"]+">([^<]+)</time>, ([^<]+) ago</small>', page.text
    )
    assert match, page.text
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", match.group(1))
    assert re.fullmatch(r"\d+(ms|\.\ds)|\d+m\d\ds", match.group(2))


# -- words ----------------------------------------------------------------------


def test_a_registered_schedule_that_never_fired_says_so_in_plain_words(app: DashboardApp) -> None:
    """Given a leader that registered report/weekly (Mondays at 03:00), Then
    its row says "not fired yet (registered)", not the ledger's jargon."""
    app.middleware.start(app.broker)
    try:
        browser = app.dashboard()
        wait_for(
            lambda: "not fired yet (registered)" in _row(browser.get("/cron/schedules").text, "report/weekly"),
            timeout=30,
            what="report/weekly registered",
        )
        row = _row(browser.get("/cron/schedules").text, "report/weekly")
        assert "baseline" not in re.sub(r"<[^>]+>", "", row)  # (only its class name says so)
        assert '<small class="what">last tick:</small>' in row
    finally:
        app.middleware.stop()
        app.broker.close()


def test_the_web_commands_logging_leaves_an_apps_own_configuration_alone() -> None:
    """Given a root logger with a handler (the app configured logging),
    configure_logging changes nothing; given none, it adds one stderr
    handler in dramatiq's format at INFO."""
    import logging

    from dramatiq_cron_middleware.web.server import LOG_FORMAT, configure_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        root.handlers = [logging.NullHandler()]
        root.setLevel(logging.WARNING)
        assert configure_logging() is False
        assert len(root.handlers) == 1 and root.level == logging.WARNING
        root.handlers = []
        assert configure_logging() is True
        (handler,) = root.handlers
        assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
        assert handler.formatter is not None and handler.formatter._fmt == LOG_FORMAT
        assert root.level == logging.INFO
    finally:
        root.handlers, root.level = handlers, level
