"""The dashboard as an operator uses it day to day, in-process against a
real redis-server: confirmation pages, the audit of actions, pages both
ways in natural order, the next-to-run view, the full add form, and what
it shows when Redis is down or a schedule is unknown."""

from __future__ import annotations

import html
import json
import logging
import os
import re
import subprocess
import sys
from urllib.parse import quote

import pytest

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.web import CronDashboard
from tests.support.dashboards import EVIL, DashboardApp, csrf_of, dashboard_app, row_ids
from tests.support.instances import ROOT
from tests.support.redis_server import RedisServer, free_port
from tests.support.wsgi import basic

pytest.importorskip("jinja2")


@pytest.fixture
def app(redis_server: RedisServer) -> DashboardApp:
    return dashboard_app(redis_server)


def _forms(page: str) -> list[str]:
    return re.findall(r'<form method="post" action="([^"]+)"', page)


# -- confirmation -------------------------------------------------------------


def test_remove_and_trigger_ask_for_confirmation_on_a_page_that_works_without_javascript(app: DashboardApp) -> None:
    """Given a runtime schedule, When the operator presses Remove or Trigger
    now on the schedules page, Then a confirmation page (a plain GET, no
    script) asks first, and only its POST acts."""
    app.middleware.runtime.add("every_second", "0 4 * * *", name="nightly")
    browser = app.dashboard()
    listing = browser.get("/cron/schedules").text
    assert "/cron/trigger" not in _forms(listing) and "/cron/runtime/remove" not in _forms(listing)
    for path, target, word in (
        ("/cron/trigger", "schedule=every_second%3Anightly", "Trigger"),
        ("/cron/runtime/remove", "id=every_second%3Anightly", "Remove"),
    ):
        assert f"{path}?{target}" in html.unescape(listing)
        confirm = browser.get(f"{path}?{target}")
        assert confirm.status == 200 and "<script" not in confirm.text
        assert path in _forms(confirm.text) and f"{word} every_second:nightly?" in html.unescape(confirm.text)
    assert app.middleware.runtime.get("every_second", "nightly") is not None
    confirm = browser.get("/cron/runtime/remove?id=every_second%3Anightly").text
    done = browser.post("/cron/runtime/remove", {"csrf": csrf_of(confirm), "id": "every_second:nightly"})
    assert done.status == 303
    assert app.middleware.runtime.get("every_second", "nightly") is None
    assert browser.get("/cron/trigger?schedule=nosuch%3Ax").status == 404


# -- audit --------------------------------------------------------------------


def test_every_dashboard_action_is_recorded_with_its_user_and_shown_in_the_history(
    app: DashboardApp, caplog: pytest.LogCaptureFixture
) -> None:
    """Given basic auth as alice, When she pauses, resumes, triggers, adds,
    edits and removes, Then each is logged at INFO and listed in the
    schedule's history with her name and what changed."""
    browser = app.dashboard(auth=("alice", "pw"))
    browser.headers.update(basic("alice", "pw"))
    token = csrf_of(browser.get("/cron/runtime/new").text)
    caplog.set_level(logging.INFO)
    form = {"csrf": token, "actor": "every_second", "name": "audited", "expression": "0 4 * * *"}
    assert browser.post("/cron/runtime/new", form).status == 303
    assert browser.post("/cron/pause", {"csrf": token, "schedule": "every_second:audited"}).status == 303
    assert browser.post("/cron/resume", {"csrf": token, "schedule": "every_second:audited"}).status == 303
    assert browser.post("/cron/trigger", {"csrf": token, "schedule": "every_second:audited"}).status == 303
    edited = {**form, "expression": "0 5 * * *", "original": "every_second:audited"}
    assert browser.post("/cron/runtime/edit", edited).status == 303
    assert browser.post("/cron/runtime/remove", {"csrf": token, "id": "every_second:audited"}).status == 303
    history = html.unescape(browser.get("/cron/schedule?id=every_second%3Aaudited").text)
    assert history.count("alice") >= 6, history
    for action in ("add", "pause", "resume", "triggered", "update", "remove"):
        assert f'data-outcome="{action}"' in history, action
    assert "expression '0 4 * * *' -> '0 5 * * *'" in history
    chart = history[history.index("<svg") : history.index("</svg>")]
    assert 'data-outcome="triggered"' in chart and 'data-outcome="pause"' not in chart  # ticks only
    renamed = {**form, "name": "renamed", "original": "every_second:audited"}
    assert browser.post("/cron/runtime/new", form).status == 303
    assert browser.post("/cron/runtime/edit", renamed).status == 303
    old = html.unescape(browser.get("/cron/schedule?id=every_second%3Aaudited").text)
    assert "renamed to every_second:renamed" in old
    new = html.unescape(browser.get("/cron/schedule?id=every_second%3Arenamed").text)
    assert "renamed from every_second:audited" in new
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "alice" in r.getMessage()]
    assert len(logged) == 9, logged


# -- pages, order, next to run -----------------------------------------------------


def _natural(ids: list[str]) -> list[str]:
    def key(text: str) -> tuple[object, ...]:
        return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text.lower()))

    return sorted(ids, key=lambda i: (key(i), i))


@pytest.mark.slow
def test_pages_go_forward_back_and_to_the_last_over_10000_schedules_in_natural_order(
    redis_server: RedisServer,
) -> None:
    """Given 10,000 runtime schedules tenant-0..tenant-9999, When the
    visitor jumps to the last page and walks back, Then every page holds
    the next rows in natural order (tenant-118 before tenant-1179) and the
    walk back meets the walk forward."""
    made = dashboard_app(redis_server)
    made.middleware.runtime.add_many(("report", "0 4 * * *", f"tenant-{i}") for i in range(10_000))
    browser = made.dashboard()
    first = browser.get("/cron/schedules?source=runtime&per_page=200").text
    assert "of 10000" in first
    assert row_ids(first)[:3] == ["report:tenant-0", "report:tenant-1", "report:tenant-2"]
    last_link = re.search(r'<a rel="last" href="([^"]+)"', first)
    assert last_link, "no link to the last page"
    url = html.unescape(last_link.group(1))
    seen: list[str] = []
    while url:
        page = browser.get(url)
        assert page.status == 200
        seen = row_ids(page.text) + seen
        back = re.search(r'<a rel="prev" href="([^"]+)"', page.text)
        url = html.unescape(back.group(1)) if back else ""
    expected = _natural([f"report:tenant-{i}" for i in range(10_000)])
    assert seen == expected
    assert seen.index("report:tenant-118") < seen.index("report:tenant-1179")
    second = browser.get(html.unescape(re.search(r'<a rel="next" href="([^"]+)"', first).group(1))).text
    assert row_ids(second)[0] == expected[200]


def test_a_runtime_schedule_added_or_removed_between_two_pages_shows_on_the_next_one(app: DashboardApp) -> None:
    """The ids are kept between pages: a write anywhere (another process
    here) moves the runtime version, and the next page reads them again."""
    app.middleware.runtime.add_many(("report", "0 4 * * *", f"t{i}") for i in (1, 2, 10))
    browser = app.dashboard()
    assert row_ids(browser.get("/cron/schedules?source=runtime").text) == ["report:t1", "report:t2", "report:t10"]
    app.middleware.runtime.add("report", "0 4 * * *", name="t3")
    app.middleware.runtime.remove("report", "t1")
    assert row_ids(browser.get("/cron/schedules?source=runtime").text) == ["report:t2", "report:t3", "report:t10"]


def test_the_next_to_run_view_lists_every_schedule_soonest_first(app: DashboardApp) -> None:
    """Given declared and runtime schedules, Then the next-to-run view lists
    them by their next tick across both kinds."""
    app.middleware.runtime.add_many(
        [("report", Schedule(every=3_600_000), "hourly"), ("report", "0 0 1 1 *", "yearly")]
    )
    page = app.dashboard().get("/cron/next")
    assert page.status == 200
    ids = row_ids(page.text)
    assert ids[0] == "every_second"
    assert ids.index("report:hourly") < ids.index("report:yearly")
    assert set(ids) == {"every_second", "report/weekly", "report:hourly", "report:yearly"}
    ticks = [int(t) for t in re.findall(r'data-next-ms="(\d+)"', page.text)]
    assert ticks == sorted(ticks) and len(ticks) == 4


# -- the add form ---------------------------------------------------------------


def test_the_add_form_sets_every_option(app: DashboardApp) -> None:
    browser = app.dashboard()
    form = browser.get("/cron/runtime/new").text
    for field in ("every", "offset", "catch_up", "catch_up_window", "jitter", "max_age", "overlap", "timezone"):
        assert f'name="{field}"' in form, field
    posted = {
        "csrf": csrf_of(form),
        "actor": "report",
        "name": "full",
        "every": "90000",
        "offset": "1000",
        "timezone": "Europe/Paris",
        "catch_up": "latest",
        "catch_up_window": "600000",
        "jitter": "500",
        "max_age": "60000",
        "overlap": "skip",
        "args": "[1]",
        "kwargs": '{"who": "me"}',
    }
    assert browser.post("/cron/runtime/new", posted).status == 303
    s = app.middleware.runtime.get("report", "full").schedule
    assert (s.every, s.offset, s.timezone, s.catch_up, s.catch_up_window) == (
        90000,
        1000,
        "Europe/Paris",
        "latest",
        600000,
    )
    assert (s.jitter, s.max_age, s.overlap, s.args, s.kwargs) == (500, 60000, "skip", (1,), {"who": "me"})
    edit = browser.get("/cron/runtime/edit?id=report%3Afull").text
    assert 'name="jitter" value="500"' in edit and 'name="every" value="90000"' in edit


def test_the_add_form_shows_every_error_at_once(app: DashboardApp) -> None:
    browser = app.dashboard()
    posted = {
        "csrf": csrf_of(browser.get("/cron/runtime/new").text),
        "actor": "report",
        "name": "bad name",
        "expression": "61 * * * *",
        "timezone": "Mars/Olympus",
        "jitter": "-1",
        "kwargs": "[",
    }
    page = browser.post("/cron/runtime/new", posted)
    assert page.status == 400
    errors = re.findall(r'<li class="field-error" data-field="([a-z_]+)"', page.text)
    assert set(errors) >= {"name", "expression", "timezone", "jitter", "kwargs"}, page.text
    assert app.middleware.runtime.get("report", "bad name".replace(" ", "-")) is None


# -- what pages show -----------------------------------------------------------------


def test_kwargs_on_the_history_card_are_escaped_once(app: DashboardApp) -> None:
    page = app.dashboard().get("/cron/schedule?id=" + quote("report/weekly")).text
    shown = re.search(r"<dt>kwargs</dt><dd><code>(.*?)</code>", page)
    assert shown, page
    assert "<" not in shown.group(1)
    assert html.unescape(shown.group(1)) == json.dumps({"x": EVIL})


def test_the_schedules_page_lists_the_declared_schedules_when_redis_is_down(app: DashboardApp) -> None:
    browser = app.dashboard()
    app.server.stop()
    page = browser.get("/cron/schedules")
    assert page.status == 200, page.text
    assert row_ids(page.text) == ["every_second", "report/weekly"]
    assert "cannot be reached" in page.text and "unknown" in page.text
    assert "Not done" not in page.text


def test_the_history_of_an_unknown_schedule_is_a_404(app: DashboardApp) -> None:
    page = app.dashboard().get("/cron/schedule?id=nosuch")
    assert page.status == 404
    assert "No schedule nosuch" in page.text and "entries of the stream" not in page.text


# -- credentials of the standalone server ----------------------------------------------


@pytest.mark.parametrize("credential", [{"token": ""}, {"token": "  "}, {"auth": ("ops", "")}, {"auth": ("", "pw")}])
def test_a_dashboard_given_an_empty_credential_is_refused(app: DashboardApp, credential: dict[str, object]) -> None:
    from dramatiq_cron_middleware.errors import CronConfigurationError

    with pytest.raises(CronConfigurationError, match=r"empty|non-empty") as refused:
        CronDashboard(app.broker, **credential)  # type: ignore[arg-type]
    assert "pw" not in str(refused.value)


def _web(env: dict[str, str], *args: str, wait: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dramatiq_cron_middleware", "web", "tests.apps.cronapp", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--token", ""], {}, "--token is empty"),
        (["--auth", ""], {}, "--auth is empty"),
        ([], {"DRAMATIQ_CRON_WEB_TOKEN": ""}, "DRAMATIQ_CRON_WEB_TOKEN is empty"),
        ([], {"DRAMATIQ_CRON_WEB_AUTH": ""}, "DRAMATIQ_CRON_WEB_AUTH is empty"),
    ],
)
def test_an_empty_credential_is_refused(
    redis_server: RedisServer, args: list[str], env: dict[str, str], message: str
) -> None:
    process = _web({"DRAMATIQ_CRON_REDIS_URL": redis_server.url, **env}, "--bind", "127.0.0.1:0", *args)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 2, stderr
    assert message in stderr


def test_the_web_credentials_can_come_from_the_environment(redis_server: RedisServer) -> None:
    import urllib.error
    import urllib.request

    port = free_port()
    env = {"DRAMATIQ_CRON_REDIS_URL": redis_server.url, "DRAMATIQ_CRON_WEB_AUTH": "bob:s3cret"}
    process = _web(env, "--bind", f"127.0.0.1:{port}")
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "Serving the cron dashboard" in line, line
        assert "s3cret" not in line
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers=basic("bob", "s3cret"))
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
