"""The web dashboard as a WSGI application, against a real redis-server
and a real leader thread in this process: rendering, escaping, CSRF,
read-only mode, authentication, pagination, actions."""

from __future__ import annotations

import dataclasses
import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from wsgiref.util import setup_testing_defaults

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.web import CronDashboard
from dramatiq_cron_middleware.web.server import Unsafe, start
from tests.support.instances import ROOT, wait_for
from tests.support.redis_server import RedisServer
from tests.support.wsgi import Browser, basic, form_fields

pytest.importorskip("jinja2")

EVIL = "<script>alert(1)</script>"
PAUSED = "{dramatiq-cron}:paused"


@dataclass
class App:
    server: RedisServer
    broker: RedisBroker
    middleware: CronMiddleware

    def dashboard(self, **kwargs: Any) -> Browser:
        guarded = {"auth", "token", "read_only"} & set(kwargs)
        return Browser(CronDashboard(self.broker, **({} if guarded else {"unauthenticated": True}), **kwargs))


def _app(server: RedisServer, *, actors: int = 1, url: str | None = None) -> App:
    broker = RedisBroker(url=f"redis://127.0.0.1:{server.port}/1")
    middleware = CronMiddleware(redis=url or server.url, lock_ttl=1000)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda x=None, who=None: None, actor_name="every_second", broker=broker, cron="* * * * * *")
    dramatiq.actor(
        lambda x=None: None,
        actor_name=EVIL,
        broker=broker,
        # (A schedule's name is an identifier: it cannot hold markup.)
        cron=Schedule("0 3 * * 1", name="nightly", kwargs={"x": EVIL}),
    )
    for i in range(actors):
        dramatiq.actor(lambda: None, actor_name=f"bulk_{i:04d}", broker=broker, cron="*/5 * * * *")
    return App(server=server, broker=broker, middleware=middleware)


@pytest.fixture
def app(redis_server: RedisServer) -> Iterator[App]:
    """An app with a leader thread running in this process."""
    made = _app(redis_server)
    made.middleware.start(made.broker)
    wait_for(lambda: redis_server.client().hget("{dramatiq-cron}:lease", "pid"), timeout=60, what="a leader")
    try:
        yield made
    finally:
        made.middleware.stop()
        made.broker.close()


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


# -- rendering -------------------------------------------------------------


def test_the_overview_names_the_leader_its_epoch_and_the_candidates(app: App) -> None:
    lease = app.server.client().hgetall("{dramatiq-cron}:lease")
    page = app.dashboard().get("/cron/")
    assert page.status == 200
    assert f'<span id="leader-pid">{lease["pid"]}</span>' in page.text
    assert f'<dd id="leader-epoch">{lease["epoch"]}</dd>' in page.text
    assert "healthy" in page.text and "reachable" in page.text
    assert page.text.count('<tr class="leader">') == 1
    # Each candidate shows its schedule set's fingerprint.
    fingerprint = app.server.client().hget("{dramatiq-cron}:candidates:info", lease["candidate"]) or ""
    assert fingerprint and fingerprint.split("|")[0] in page.text


def test_the_schedules_page_shows_words_next_runs_last_outcome_and_source(app: App) -> None:
    ticks = app.server.client()
    wait_for(
        lambda: (ticks.hget("{dramatiq-cron}:ticks", "every_second") or "").endswith(":1"),
        timeout=60,
        what="a fired tick",
    )
    page = app.dashboard().get("/cron/schedules?q=every_second")
    assert page.status == 200
    row = page.text[page.text.index('data-schedule="every_second"') :]
    row = row[: row.index("</tr>")]
    assert "Every second" in row
    assert row.count("<time") == 3
    assert "code" in row and ">no<" in row


def test_actor_names_schedule_names_and_kwargs_are_escaped_everywhere(app: App) -> None:
    browser = app.dashboard()
    schedule_id = f"{EVIL}/nightly"
    pages = [browser.get("/cron/schedules"), browser.get("/cron/schedule?id=" + quote(schedule_id))]
    for page in pages:
        assert page.status == 200, page.text
        assert "<script>alert" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "&#34;x&#34;" in pages[-1].text or "\\u003cscript" in pages[-1].text  # the kwargs, escaped


def test_no_page_shows_the_redis_password(redis_server: RedisServer) -> None:
    redis_server.client().config_set("requirepass", "s3cret-pw")
    made = _app(redis_server, url=f"redis://default:s3cret-pw@127.0.0.1:{redis_server.port}/0")
    browser = made.dashboard()
    for url in ("/cron/", "/cron/schedules", "/cron/schedule?id=every_second"):
        page = browser.get(url)
        assert page.status == 200
        assert "s3cret-pw" not in page.text
        assert f"127.0.0.1:{redis_server.port}" in page.text


# -- actions, CSRF, read-only -----------------------------------------------


def test_pause_needs_a_post_with_the_csrf_token_and_then_shows_as_paused(app: App) -> None:
    client = app.server.client()
    browser = app.dashboard()
    target = "every_second"
    # A GET changes nothing.
    assert browser.get("/cron/pause?schedule=every_second").status == 405
    page = browser.get("/cron/schedules")
    token = csrf_of(page.text)
    # No token, a wrong one, a foreign origin: refused, nothing paused.
    assert browser.post("/cron/pause", {"schedule": target}).status == 403
    assert browser.post("/cron/pause", {"schedule": target, "csrf": "forged" * 5}).status == 403
    foreign = browser.post("/cron/pause", {"schedule": target, "csrf": token}, headers={"Origin": "http://evil.test"})
    assert foreign.status == 403
    assert Browser(browser.app).post("/cron/pause", {"schedule": target, "csrf": token}).status == 403  # no cookie
    assert client.smembers(PAUSED) == set()

    done = browser.post("/cron/pause", {"schedule": target, "csrf": token, "next": "/schedules?q=every"})
    assert done.status == 303
    assert done.header("Location") == "/cron/schedules?q=every"
    shown = browser.get("/cron/schedules?q=every")
    assert f'<p class="notice" role="status">Paused {html.escape(target, quote=False)}.</p>' in shown.text
    assert 'class="notice"' not in browser.get("/cron/schedules?q=every").text  # shown once
    assert client.smembers(PAUSED) == {target}
    page = browser.get("/cron/schedules?q=every_second&state=paused")
    assert 'class="badge paused"' in page.text and "Resume" in page.text
    # The leader records the next ticks as paused.
    wait_for(
        lambda: any(f.get("outcome") == "paused" for _, f in client.xrange("{dramatiq-cron}:history")),
        timeout=60,
        what="a paused tick",
    )
    assert browser.post("/cron/resume", {"schedule": target, "csrf": token}).status == 303
    assert client.smembers(PAUSED) == set()


def test_trigger_enqueues_one_manual_message_and_the_history_shows_it(app: App) -> None:
    browser = app.dashboard()
    token = csrf_of(browser.get("/cron/schedules").text)
    target = "every_second"
    assert browser.post("/cron/trigger", {"schedule": target, "csrf": token}).status == 303
    history = browser.get("/cron/schedule?id=every_second")
    assert history.text.count('data-outcome="triggered"') >= 1
    assert "<svg" in history.text
    queued = app.server.client(db=1).hvals("dramatiq:default.msgs")
    assert any('"cron_manual":true' in body for body in queued)


def test_a_read_only_dashboard_shows_no_buttons_and_refuses_every_post(app: App) -> None:
    browser = app.dashboard(read_only=True)
    page = browser.get("/cron/schedules")
    assert '<form method="post"' not in page.text and "Trigger now" not in page.text
    assert "read-only" in page.text
    csrf = browser.cookies["cron_csrf"]
    refused = browser.post("/cron/pause", {"schedule": "every_second", "csrf": csrf})
    assert refused.status == 403 and "read-only" in refused.text
    assert app.server.client().smembers(PAUSED) == set()


# -- authentication ------------------------------------------------------------


def test_basic_auth_is_required_when_configured(app: App) -> None:
    browser = app.dashboard(auth=("ops", "pa55"))
    refused = browser.get("/cron/")
    assert refused.status == 401 and (refused.header("WWW-Authenticate") or "").startswith("Basic")
    assert browser.get("/cron/", headers=basic("ops", "wrong")).status == 401
    assert browser.get("/cron/", headers=basic("ops", "pa55")).status == 200


def test_a_token_works_as_bearer_or_once_in_the_address_then_as_a_cookie(app: App) -> None:
    browser = app.dashboard(token="t0ken")
    assert browser.get("/cron/").status == 401
    assert browser.get("/cron/", headers={"Authorization": "Bearer t0ken"}).status == 200
    visit = browser.get("/cron/schedules?token=t0ken&q=x")
    assert visit.status == 303 and "token" not in (visit.header("Location") or "")
    assert browser.get("/cron/schedules").status == 200  # the cookie carries it now


def test_a_non_loopback_bind_without_auth_is_refused(app: App) -> None:
    dashboard = CronDashboard(app.broker, prefix="", unauthenticated=True)
    with pytest.raises(Unsafe):
        start(dashboard, "0.0.0.0", 0, authenticated=False)
    server = start(dashboard, "127.0.0.1", 0, authenticated=False)
    server.shutdown()
    server.server_close()


# -- pagination ---------------------------------------------------------------


def test_pages_of_schedules_follow_each_other_without_gaps_or_repeats(redis_server: RedisServer) -> None:
    made = _app(redis_server, actors=120)
    browser = made.dashboard()
    seen: list[str] = []
    url = "/cron/schedules?source=code"
    pages = 0
    while url:
        page = browser.get(url)
        assert page.status == 200
        seen += [html.unescape(s) for s in re.findall(r'<tr data-schedule="([^"]+)"', page.text)]
        pages += 1
        more = re.search(r'<a rel="next" href="([^"]+)"', page.text)
        url = html.unescape(more.group(1)) if more else ""
    assert pages == 3
    assert seen == [s.id for s in made.middleware.all_schedules()]


# -- runtime schedules ------------------------------------------------------------


def test_runtime_schedules_are_added_edited_and_removed_with_the_apis_own_errors(app: App) -> None:
    pytest.importorskip("dramatiq_cron_middleware.store.runtime")
    from dramatiq_cron_middleware.errors import CronScheduleError

    browser = app.dashboard()
    form_page = browser.get("/cron/runtime/new")
    assert form_page.status == 200
    token = csrf_of(form_page.text)
    bad = {"csrf": token, "actor": "every_second", "name": "nightly", "expression": "61 * * * *", "kwargs": "{}"}
    refused = browser.post("/cron/runtime/new", bad)
    assert refused.status == 400
    with pytest.raises(CronScheduleError) as api:
        app.middleware.runtime.add("every_second", "61 * * * *", name="nightly")
    shown = re.search(r'<li class="field-error" data-field="expression">(.*?)</li>', refused.text, re.S)
    assert shown and html.unescape(shown.group(1)) == str(api.value)
    assert 'value="61 * * * *"' in refused.text  # what was typed stays in the form

    good = {**bad, "expression": "0 4 * * *", "kwargs": '{"who": "' + EVIL.replace('"', "") + '"}'}
    assert browser.post("/cron/runtime/new", good).status == 303
    listed = browser.get("/cron/schedules?source=runtime")
    assert 'data-schedule="every_second:nightly"' in listed.text and "At 04:00" in listed.text
    assert "<script>alert" not in browser.get("/cron/schedule?id=every_second:nightly").text

    edited = {**good, "expression": "30 4 * * *", "original": "every_second:nightly"}
    assert browser.post("/cron/runtime/edit", edited).status == 303
    assert app.middleware.runtime.get("every_second", "nightly").schedule.expression == "30 4 * * *"

    assert browser.post("/cron/runtime/remove", {"csrf": token, "id": "every_second:nightly"}).status == 303
    assert app.middleware.runtime.get("every_second", "nightly") is None
    assert 'data-schedule="every_second:nightly"' not in browser.get("/cron/schedules?source=runtime").text


# -- mounting and the standalone command ------------------------------------------


def test_under_a_dispatcher_mount_every_link_keeps_the_mount_point(app: App) -> None:
    """As Flask's DispatcherMiddleware hands it over: the mount point in
    SCRIPT_NAME, the rest in PATH_INFO."""
    dashboard = CronDashboard(app.broker, unauthenticated=True)  # prefix="/cron", already consumed by the mount
    captured: dict[str, Any] = {}
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(SCRIPT_NAME="/ops/cron", PATH_INFO="/schedules", QUERY_STRING="")
    body = b"".join(dashboard(environ, lambda s, h, e=None: captured.update(status=s))).decode()
    assert captured["status"].startswith("200")
    links = re.findall(r'(?:href|action)="(/[^"]*)"', body)
    assert links and all(link.startswith("/ops/cron/") for link in links), links


def test_the_overview_warns_when_redis_may_evict_the_ledger(app: App) -> None:
    app.server.client().config_set("maxmemory-policy", "allkeys-lru")
    page = app.dashboard().get("/cron/")
    assert "maxmemory-policy is allkeys-lru" in page.text


def test_dramatiq_cron_web_refuses_a_public_address_without_auth(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dramatiq_cron_middleware", "web", "tests.apps.cronapp", "--bind", "0.0.0.0:0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DRAMATIQ_CRON_REDIS_URL": redis_server.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to serve the dashboard on 0.0.0.0 without --auth or --token" in done.stderr


def test_pages_run_from_declared_into_runtime_schedules_and_search_both(redis_server: RedisServer) -> None:
    """Given 60 declared and 70 runtime schedules, When a visitor follows
    the next links 20 rows at a time, Then every schedule shows once, the
    declared ones first, and a search finds names of both kinds."""
    pytest.importorskip("dramatiq_cron_middleware.store.runtime")
    made = _app(redis_server, actors=58)  # + every_second and the <script> one
    made.middleware.runtime.add_many((f"bulk_{i % 3:04d}", "0 4 * * *", f"r{i:03d}") for i in range(70))
    browser = made.dashboard()
    seen: list[str] = []
    url = "/cron/schedules?per_page=20"
    while url:
        page = browser.get(url)
        assert page.status == 200
        seen += [html.unescape(s) for s in re.findall(r'<tr data-schedule="([^"]+)"', page.text)]
        more = re.search(r'<a rel="next" href="([^"]+)"', page.text)
        url = html.unescape(more.group(1)) if more else ""
    declared = [s.id for s in made.middleware.all_schedules()]
    runtime = sorted(f"bulk_{i % 3:04d}:r{i:03d}" for i in range(70))
    assert seen == declared + runtime
    assert "130 matching" in browser.get("/cron/schedules").text
    found = browser.get("/cron/schedules?q=r069").text
    assert re.findall(r'<tr data-schedule="([^"]+)"', found) == ["bulk_0000:r069"]


def test_an_unreachable_redis_is_shown_not_raised(redis_server: RedisServer) -> None:
    made = _app(redis_server)
    browser = made.dashboard()
    redis_server.stop()
    overview = browser.get("/cron/")
    assert overview.status == 200 and "unreachable" in overview.text
    schedules = browser.get("/cron/schedules")
    assert schedules.status == 200 and "cannot be reached" in schedules.text
    assert "Traceback" not in schedules.text


def test_editing_a_runtime_schedule_keeps_the_options_the_form_does_not_show(app: App) -> None:
    pytest.importorskip("dramatiq_cron_middleware.store.runtime")
    app.middleware.runtime.add(
        "every_second", Schedule("0 5 * * *", jitter=500, overlap="skip", max_age=60_000), name="kept"
    )
    browser = app.dashboard()
    form = browser.get("/cron/runtime/edit?id=every_second:kept")
    assert form.status == 200 and 'value="0 5 * * *"' in form.text
    edited = {"csrf": csrf_of(form.text), "actor": "every_second", "name": "kept", "expression": "0 6 * * *"}
    assert browser.post("/cron/runtime/edit", {**edited, "original": "every_second:kept"}).status == 303
    stored = app.middleware.runtime.get("every_second", "kept").schedule
    assert (stored.expression, stored.jitter, stored.overlap, stored.max_age) == ("0 6 * * *", 500, "skip", 60_000)


def test_the_edit_form_saved_unchanged_keeps_descriptions_and_one_shots(app: App) -> None:
    """Issue 28 item 6: Given a one-shot two days out and a schedule with a
    description, When each one's Edit page is saved exactly as the page
    shows it (every field as a browser posts it), Then both are stored as
    they were: the description kept, the one-shot still a one-shot."""
    now = int(app.server.client().time()[0]) * 1000
    app.middleware.add("every_second", at=now + 2 * 86_400_000, name="once", description="Send the\nreminder ")
    app.middleware.add(
        "every_second",
        Schedule("0 5 * * *", description="  nightly <b>export</b>", timezone="Europe/Berlin", options={"priority": 3}),
        name="described",
    )
    browser = app.dashboard()
    for schedule_id in ("every_second:once", "every_second:described"):
        before = app.middleware.get(schedule_id)
        page = browser.get("/cron/runtime/edit?id=" + quote(schedule_id))
        assert page.status == 200
        posted = form_fields(page.text, "runtime-form")
        assert posted["original"] == schedule_id and posted["description"] == before.schedule.description
        assert browser.post("/cron/runtime/edit", posted).status == 303
        after = app.middleware.get(schedule_id)
        assert dataclasses.replace(after.schedule, revision=0) == dataclasses.replace(before.schedule, revision=0)
    assert app.middleware.get("every_second:once").schedule.at == now + 2 * 86_400_000


def test_the_add_form_takes_a_one_shot_and_a_description(app: App) -> None:
    browser = app.dashboard()
    token = csrf_of(browser.get("/cron/runtime/new").text)
    now = int(app.server.client().time()[0]) * 1000
    at = now + 3_600_000
    posted = {"csrf": token, "actor": "every_second", "name": "later", "at": str(at), "description": "Once, later"}
    assert browser.post("/cron/runtime/new", posted).status == 303
    stored = app.middleware.get("every_second:later").schedule
    assert (stored.at, stored.description) == (at, "Once, later")
    refused = browser.post("/cron/runtime/new", {**posted, "name": "bad", "at": "١٢٣"})
    assert refused.status == 400 and "cannot read" in html.unescape(refused.text)


# -- presentation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("*/5 * * * *", "Every 5 minutes"),
        ("0 3 * * 1", "At 03:00, only on Monday"),
        ("*/10 * * * * *", "Every 10 seconds"),
        ("0 0 * * 7", "At 00:00, only on Sunday"),
        ("not cron", "not cron"),  # what the library cannot read is shown as it is
    ],
)
def test_an_expression_in_words(expression: str, words: str) -> None:
    from dramatiq_cron_middleware.web.describe import describe

    assert describe(expression) == words


def test_an_h_field_is_described_by_the_minute_the_schedule_really_fires_at() -> None:
    from croniter import croniter

    from dramatiq_cron_middleware.web.describe import describe

    minute = croniter("H * * * *", 0, hash_id="job/hourly").get_next(float) // 60 % 60
    assert describe("H * * * *", hash_id="job/hourly") == f"At {int(minute)} minutes past the hour"


def test_the_chart_draws_one_mark_per_entry_coloured_by_outcome() -> None:
    from dramatiq_cron_middleware.store.operator import HistoryEntry
    from dramatiq_cron_middleware.web.chart import lag_chart

    entries = [
        HistoryEntry(f"{i}-0", "a/b@UTC", i * 1000, outcome, i * 1000 + 5, 1, detail, "m")
        for i, (outcome, detail) in enumerate([("fired", "5"), ("paused", ""), ("caught_up", "900"), ("missed", "")])
    ]
    svg = lag_chart(entries)
    assert re.findall(r'data-outcome="([a-z_]+)"', svg) == ["fired", "paused", "caught_up", "missed"]
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([0-9.]+)"', svg)]
    assert heights[2] == max(heights)  # the 900 ms catch-up is the tallest
