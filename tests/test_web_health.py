"""Run monitoring on the dashboard, as a WSGI application against a real
redis-server, a real leader thread and a real dramatiq ``Worker`` in this
process: ``/health`` for probes, the overview's counts, the health column,
the schedules that need attention and the health filter, and a schedule's
runs with their duration chart (errors escaped)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.monitoring.read import check_report
from dramatiq_cron_middleware.testing import running_worker
from dramatiq_cron_middleware.web import CronDashboard
from dramatiq_cron_middleware.web.health_pages import ReportCache
from tests.support.dashboards import csrf_of, row_ids
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer
from tests.support.wsgi import Browser

pytest.importorskip("jinja2")

T = TypeVar("T")

EVIL = "<script>alert(1)</script>"
SECRET = "redis://user:hunter2@db.example:6379/0"


@dataclass
class Monitored:
    server: RedisServer
    broker: RedisBroker
    middleware: CronMiddleware
    web: Browser

    def health(self) -> tuple[int, Any]:
        reply = self.web.get("/cron/health")
        assert reply.header("Content-Type") == "application/json"
        return reply.status, json.loads(reply.text)


#: A run's outcomes before it ends: ``broken`` and ``healthy`` fire every
#: second, so a read can fall between a tick's enqueue (``pending``) and the
#: end of its run.
UNSETTLED = {"pending", "running"}


def settled(read: Callable[[], T], outcomes: Callable[[T], list[str]], *, what: str) -> T:
    """The first of repeated ``read()``s in which every run it shows has
    ended (``outcomes`` lists them): what it says of a run is then final."""

    def ended() -> tuple[T] | None:
        answer = read()
        return None if UNSETTLED & set(outcomes(answer)) else (answer,)

    return wait_for(ended, timeout=60, interval=0.1, what=f"{what} with every run shown ended")[0]


@contextmanager
def monitoring(server: RedisServer) -> Iterator[Monitored]:
    """Given ``healthy`` and ``broken`` (it raises, without retries), each
    every second, with a leader and two worker threads running them, Then
    ``broken`` fails and ``healthy`` is ok."""
    broker = RedisBroker(url=f"redis://127.0.0.1:{server.port}/1")
    middleware = CronMiddleware(redis=server.url, lock_ttl=1000, grace=2000)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="healthy", broker=broker, cron="* * * * * *")

    def broken() -> None:
        raise RuntimeError(f"{EVIL} could not reach {SECRET}")

    dramatiq.actor(broken, actor_name="broken", broker=broker, cron="* * * * * *", max_retries=0)
    try:
        with running_worker(broker, worker_threads=2, worker_timeout=100):
            wait_for(
                lambda: (
                    {s.schedule_id: s.health for s in check_report(middleware, broker).schedules}
                    == {"healthy": "ok", "broken": "failing"}
                ),
                timeout=20,
                interval=0.1,
                what="broken failing and healthy ok",
            )
            yield Monitored(server, broker, middleware, Browser(CronDashboard(broker, unauthenticated=True)))
    finally:
        middleware.stop()
        broker.close()


@pytest.fixture(scope="module")
def monitored() -> Iterator[Monitored]:
    """One app for the tests that only read (its own redis-server)."""
    with RedisServer() as server, monitoring(server) as app:
        yield app


@pytest.mark.slow
def test_health_answers_the_check_document_with_503_while_a_schedule_fails_and_200_once_none_does(
    redis_server: RedisServer,
) -> None:
    with monitoring(redis_server) as monitored:
        health_answers(monitored)


def health_answers(monitored: Monitored) -> None:
    status, document = settled(
        monitored.health,
        lambda answer: [s["last_run"]["outcome"] for s in answer[1]["schedules"] if s["last_run"]],
        what="/health",
    )
    assert status == 503
    expected = check_report(monitored.middleware, monitored.broker).to_json()
    assert [(s["id"], s["health"]) for s in document["schedules"]] == [
        (s["id"], s["health"]) for s in expected["schedules"]
    ]
    # The schedule sets, as in check --json.
    assert set(document) == {"schedules", "stored", "mixed_schedule_sets", "schedule_sets"}
    assert document["stored"] == expected["stored"]
    broken = next(s for s in document["schedules"] if s["id"] == "broken")
    assert set(broken) == {"id", "actor", "name", "health", "since", "last_run"}
    assert broken["last_run"]["outcome"] == "failed"
    assert "hunter2" not in json.dumps(document)
    # Paused, the schedule is no problem any more: 200 (once the dashboard
    # reads the health again, within a couple of seconds).
    monitored.server.client().sadd("{dramatiq-cron}:paused", "broken")
    status, document = wait_for(
        lambda: (answer := monitored.health())[0] == 200 and answer, timeout=10, what="200 on /health"
    )
    assert {s["id"]: s["health"] for s in document["schedules"]} == {"healthy": "ok", "broken": "paused"}
    # Redis unreachable: 503 with one line saying so.
    monitored.server.stop()
    status, document = wait_for(
        lambda: (answer := monitored.health())[0] == 503 and answer, timeout=10, what="503 on /health"
    )
    assert list(document) == ["error"] and "cannot be reached" in document["error"]


def test_the_overview_counts_the_problems_and_links_them(monitored: Monitored) -> None:
    page = monitored.web.get("/cron/").text
    assert '<p class="big" id="health-summary"><a href="/cron/schedules?health=problems">1 failing</a></p>' in page
    assert '<dt>failing</dt><dd><a href="/cron/schedules?health=failing">1</a></dd>' in page
    assert '<dt>ok</dt><dd><a href="/cron/schedules?health=ok">1</a></dd>' in page


def test_schedules_show_their_health_problems_first_and_filter_by_it(monitored: Monitored) -> None:
    page = settled(
        lambda: monitored.web.get("/cron/schedules").text,
        lambda text: re.findall(r'class="run run-([a-z]+)"', text),
        what="the schedules page",
    )
    attention, everything = page.split('<table id="schedules" class="stack">')
    assert "Needs attention" in attention
    assert 'data-problem="broken"' in attention and 'data-problem="healthy"' not in attention
    assert EVIL not in page and html.escape(EVIL) in attention  # the error, escaped
    assert "hunter2" not in page
    rows = {
        schedule: row for schedule, row in (part.split('"', 1) for part in everything.split('<tr data-schedule="')[1:])
    }
    assert '<span class="health health-failing">failing</span>' in rows["broken"]
    assert '<span class="health health-ok">ok</span>' in rows["healthy"]
    # The enqueue and the run are told apart in words (issue 30).
    assert 'last run: <span class="run run-failed">failed</span>' in rows["broken"]
    assert re.search(r'<small class="what">last (enqueued|tick):</small> <span class="outcome', rows["broken"])
    assert "Last outcome" not in page

    failing = monitored.web.get("/cron/schedules?health=failing").text
    assert 'data-schedule="broken"' in failing and 'data-schedule="healthy"' not in failing
    assert "Needs attention" not in failing
    assert '<option value="failing" selected>' in failing
    ok = monitored.web.get("/cron/schedules?health=ok").text
    assert 'data-schedule="healthy"' in ok and 'data-schedule="broken"' not in ok
    none = monitored.web.get("/cron/schedules?health=missed").text
    assert "No schedule matches." in none
    assert monitored.web.get("/cron/schedules?health=nonsense").status == 200  # read leniently: any


def test_a_schedules_page_shows_its_runs_with_escaped_errors_and_a_duration_chart(monitored: Monitored) -> None:
    page = settled(
        lambda: monitored.web.get("/cron/schedule?id=broken").text,
        lambda text: re.findall(r'data-outcome="([a-z]+)"', text),
        what="broken's page",
    )
    runs = page.split('<section id="runs">', 1)[1].split("</section>", 1)[0]
    assert '<span class="health health-failing">failing</span>' in runs
    assert runs.count('<tr class="run-row" data-outcome="failed">') >= 1
    assert EVIL not in page and html.escape(EVIL) in runs
    assert "hunter2" not in page and "redis://***@db.example" in runs
    chart = runs.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert chart.count('data-outcome="failed"') == runs.count('<tr class="run-row"')
    assert "Duration and outcome of the last" in chart
    healthy = monitored.web.get("/cron/schedule?id=healthy").text
    assert '<tr class="run-row" data-outcome="succeeded">' in healthy


def test_every_schedules_health_is_read_again_in_the_background_after_ten_times_the_read() -> None:
    """The report cache on a fake clock: the first read is waited for; a
    read taking 1 s is used for 10 s, a quick one for 2 s; then one
    background read replaces it while the old one is still served; a failed
    background read keeps the last report."""
    clock = [0.0]
    reads: list[Any] = []
    jobs: list[Any] = []

    def read() -> Any:
        reads.append(clock[0])
        if len(reads) in (1, 4):
            raise ConnectionError("down")
        clock[0] += 1.0 if len(reads) == 2 else 0.001
        return f"report {len(reads)}"

    cache = ReportCache(read, monotonic=lambda: clock[0], background=jobs.append)
    with pytest.raises(ConnectionError):
        cache.get()  # the first read is waited for, and its error raised
    assert cache.get() == "report 2"  # took 1 s: fresh until 11 s
    clock[0] = 10.9
    assert (cache.get(), jobs) == ("report 2", [])
    clock[0] = 11.0
    assert cache.get() == "report 2" and cache.get() == "report 2"
    assert len(jobs) == 1  # one background read at a time
    jobs.pop()()
    assert cache.get() == "report 3"  # quick: fresh for 2 s
    clock[0] = 13.1
    assert cache.get() == "report 3"
    jobs.pop()()  # fails
    assert (cache.get(), jobs) == ("report 3", [])
    clock[0] = 15.2
    cache.get()
    jobs.pop()()
    assert cache.get() == "report 5"


def test_the_runtime_form_takes_grace_max_runtime_and_failure_threshold(redis_server: RedisServer) -> None:
    """Given the add form, Then the three thresholds are stored with the
    runtime schedule (empty: the middleware's), a value that is no number
    or that the schedule refuses is shown as the error, and editing keeps
    them."""
    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="report", broker=broker)
    web = Browser(CronDashboard(broker, unauthenticated=True))
    try:
        token = csrf_of(web.get("/cron/runtime/new").text)
        form = {"csrf": token, "actor": "report", "name": "nightly", "expression": "0 3 * * *"}
        typo = web.post("/cron/runtime/new", {**form, "grace": "1 min"})
        assert typo.status == 400 and "grace is a whole number of milliseconds" in html.unescape(typo.text)
        refused = web.post("/cron/runtime/new", {**form, "failure_threshold": "0"})
        assert refused.status == 400 and "failure_threshold" in html.unescape(refused.text)
        assert middleware.runtime.get("report", "nightly") is None
        # With the form's other options: every mistake at once, each by its field.
        wrong = {"grace": "-1", "max_runtime": "0", "failure_threshold": "x", "jitter": "-1", "timezone": "Mars/Base"}
        every = web.post("/cron/runtime/new", {**form, **wrong})
        fields = re.findall(r'<li class="field-error" data-field="([a-z_]+)"', every.text)
        assert every.status == 400 and sorted(fields) == sorted(wrong), every.text
        assert 'name="max_runtime" value="0"' in every.text  # what was typed, kept
        assert middleware.runtime.get("report", "nightly") is None

        thresholds = {"grace": "120000", "max_runtime": "3600000", "failure_threshold": "3"}
        assert web.post("/cron/runtime/new", {**form, **thresholds}).status == 303
        stored = middleware.runtime.get("report", "nightly").schedule
        assert (stored.grace, stored.max_runtime, stored.failure_threshold) == (120_000, 3_600_000, 3)
        edit = web.get("/cron/runtime/edit?id=report:nightly").text
        assert all(f'name="{k}" value="{v}"' in edit for k, v in thresholds.items())
        edited = {**form, **thresholds, "expression": "30 3 * * *", "original": "report:nightly", "grace": ""}
        assert web.post("/cron/runtime/edit", edited).status == 303
        stored = middleware.runtime.get("report", "nightly").schedule
        assert (stored.expression, stored.grace, stored.failure_threshold) == ("30 3 * * *", None, 3)
    finally:
        broker.close()


def test_the_health_filter_pages_its_schedules_in_natural_order(redis_server: RedisServer) -> None:
    """Given 45 runtime schedules that have not run yet (pending), two of
    them paused, When filtering by health 20 a page, Then the pages hold the
    pending ones in natural order with first/previous/next/last links that
    keep the filter, a page past the last shows the last, and the paused
    ones are their own filter."""
    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="report", broker=broker)
    try:
        middleware.runtime.add_many(("report", "0 4 * * *", f"tenant-{i}") for i in range(45))
        for name in ("tenant-3", "tenant-30"):
            middleware.pause(f"report:{name}")
        web = Browser(CronDashboard(broker, unauthenticated=True))
        pending = [f"report:tenant-{i}" for i in range(45) if i not in (3, 30)]

        first = web.get("/cron/schedules?health=pending&per_page=20").text
        assert row_ids(first) == pending[:20] and "page 1 of 3" in first
        last_link = re.search(r'<a rel="last" href="([^"]+)"', first)
        assert last_link and "health=pending" in last_link.group(1)
        last = web.get(html.unescape(last_link.group(1))).text
        assert row_ids(last) == pending[40:] and "page 3 of 3" in last
        back = re.search(r'<a rel="prev" href="([^"]+)"', last)
        assert back and row_ids(web.get(html.unescape(back.group(1))).text) == pending[20:40]
        beyond = web.get("/cron/schedules?health=pending&per_page=20&page=99").text
        assert row_ids(beyond) == pending[40:] and "page 3 of 3" in beyond

        paused = web.get("/cron/schedules?health=paused").text
        assert row_ids(paused) == ["report:tenant-3", "report:tenant-30"]
        assert paused.count('<span class="health health-paused">paused</span>') == 2
    finally:
        broker.close()
