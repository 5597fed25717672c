"""Operators act on exactly the schedule they chose (issue 18, item 4).

An actor's one unnamed schedule is known by the actor's name, so ``report``
names both the actor and that schedule.  The command and the dashboard
resolve what an operator names with one function
(``control.resolve_target``): a schedule id is taken as it is, an actor
name with several schedules is refused with the list to choose from, and
the whole actor is acted on only when asked for explicitly (``--actor``).
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from tests.support.command import dramatiq_cron
from tests.support.instances import ROOT, wait_for
from tests.support.redis_server import RedisServer
from tests.support.wsgi import Browser

APP = "tests.apps.reportapp"
PAUSED = "{dramatiq-cron}:paused"
HISTORY = "{dramatiq-cron}:history"
TENANTS = 2000


def cli(server: RedisServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``dramatiq-cron`` as an operator runs it, against the report app."""
    env = {"DRAMATIQ_CRON_REDIS_URL": server.url, "REPORT_APP_BROKER": f"redis://127.0.0.1:{server.port}/1"}
    return dramatiq_cron(env, *args)


def queued(server: RedisServer) -> list[dict[str, Any]]:
    """The messages in the app broker's default queue."""
    return [json.loads(body) for body in server.client(db=1).hvals("dramatiq:default.msgs")]


def manual(server: RedisServer) -> list[dict[str, Any]]:
    """The manual triggers among the queued messages (a leader firing every
    second queues its ticks beside them)."""
    return [m for m in queued(server) if m["options"].get("cron_manual")]


def triggered(server: RedisServer) -> list[str]:
    """The schedule ids of the manual triggers in the history."""
    entries = server.client().xrange(HISTORY)
    return [f["schedule"] for _, f in entries if f.get("outcome") == "triggered"]


def add_tenants(server: RedisServer, count: int = TENANTS) -> None:
    """Store ``count`` runtime schedules of ``send_report``, one per tenant,
    through the API, as an app would."""
    broker = RedisBroker(url=f"redis://127.0.0.1:{server.port}/1")
    middleware = CronMiddleware(redis=server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda tenant_id=0: None, actor_name="send_report", broker=broker)
    middleware.runtime.add_many(
        ("send_report", Schedule("0 9 * * *", kwargs={"tenant_id": n}), f"tenant-{n:04d}") for n in range(count)
    )
    broker.close()


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dramatiq-cron: error: "), done.stderr
    return lines[0]


# -- the command ---------------------------------------------------------------


def test_trigger_of_an_actor_name_that_is_also_its_unnamed_schedules_id_triggers_that_schedule(
    redis_server: RedisServer,
) -> None:
    """Given ``report`` with ``report/nightly`` (kwargs full) and an unnamed
    schedule, whose id ``list`` prints as ``report``, When the operator
    triggers ``report``, Then that schedule alone is enqueued (issue 28
    item 7: the id ``list`` prints is a target, not an ambiguity)."""
    done = cli(redis_server, "trigger", APP, "report", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schedule"] == "report"
    [message] = queued(redis_server)
    assert message["kwargs"] == {} and triggered(redis_server) == ["report"]


def test_every_id_that_list_prints_is_a_target_of_every_command(redis_server: RedisServer) -> None:
    """Given declared schedules (an unnamed one whose id is its actor's
    name, a named one, an actor's only one) and a runtime one, When every
    id ``list --json`` prints is given to every command that takes a
    schedule, as its target and as ``--schedule``, Then each command acts
    on exactly that schedule: trigger, pause, resume, runs, history,
    backfill, and remove for the runtime one."""
    add_tenants(redis_server, 1)
    listed = json.loads(cli(redis_server, "list", APP, "--json").stdout)["schedules"]
    ids = [s["id"] for s in listed]
    assert set(ids) == {"report", "report/nightly", "cleanup", "send_report:tenant-0000"}
    now_ms = int(redis_server.client().time()[0]) * 1000
    span = ["--from", str(now_ms - 86_400_000), "--to", str(now_ms), "--dry-run"]
    calls: list[list[str]] = []
    for schedule_id in ids:
        for how in ([schedule_id], ["--schedule", schedule_id]):
            calls += [
                ["trigger", APP, *how, "--json"],
                ["pause", APP, *how, "--json"],
                ["resume", APP, *how, "--json"],
                ["runs", APP, *how, "--json"],
                ["backfill", APP, *how, *span, "--json"],
            ]
        calls.append(["history", APP, schedule_id, "--json"])
    calls.append(["remove", APP, "send_report:tenant-0000", "--json"])
    results = run_commands(redis_server, calls)
    for argv, (status, out, err) in zip(calls, results, strict=True):
        assert status == 0, (argv, err)
        data = json.loads(out)
        schedule_id = argv[argv.index("--schedule") + 1] if "--schedule" in argv else argv[2]
        if argv[0] in ("trigger", "pause", "resume", "backfill", "remove"):
            assert data["schedule"] == schedule_id, (argv, data)
        if argv[0] == "pause":
            assert data["paused"] == [schedule_id], (argv, data)
        if argv[0] == "history":
            assert schedule_id in {e["schedule"] for e in data["entries"]}, (argv, data)
    assert sorted(triggered(redis_server)) == sorted(ids * 2)


def test_an_actor_name_that_is_no_id_stays_refused_when_it_has_several_schedules(redis_server: RedisServer) -> None:
    add_tenants(redis_server, 2)
    error = one_line_error(cli(redis_server, "trigger", APP, "send_report"))
    assert "send_report:tenant-0000" in error and "send_report:tenant-0001" in error and "--schedule" in error
    assert queued(redis_server) == []


def run_commands(server: RedisServer, calls: list[list[str]]) -> list[tuple[int, str, str]]:
    """Run ``dramatiq-cron`` once per argument list, all in one process
    (the app loaded once per call, as the command does): each call's exit
    status, stdout and stderr."""
    script = (
        "import contextlib, io, json, sys\n"
        "from dramatiq_cron_middleware.ops.cli import main\n"
        "out = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    o, e = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):\n"
        "        status = main(argv)\n"
        "    out.append([status, o.getvalue(), e.getvalue()])\n"
        "print(json.dumps(out))\n"
    )
    env = {"DRAMATIQ_CRON_REDIS_URL": server.url, "REPORT_APP_BROKER": f"redis://127.0.0.1:{server.port}/1"}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(calls)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return [tuple(r) for r in json.loads(done.stdout)]


def test_trigger_of_the_unnamed_schedule_by_its_id_enqueues_that_schedule(redis_server: RedisServer) -> None:
    done = cli(redis_server, "trigger", APP, "--schedule", "report", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schedule"] == "report"
    [message] = queued(redis_server)
    assert message["actor_name"] == "report" and message["kwargs"] == {}  # not the nightly's full=True
    assert message["options"]["cron_schedule"] == "report"
    assert triggered(redis_server) == ["report"]

    done = cli(redis_server, "trigger", APP, "report/nightly")
    assert done.returncode == 0, done.stderr
    assert sorted(m["kwargs"].get("full", False) for m in queued(redis_server)) == [False, True]
    assert triggered(redis_server) == ["report", "report/nightly"]


def test_an_actor_with_one_schedule_is_still_named_by_the_actor(redis_server: RedisServer) -> None:
    done = cli(redis_server, "trigger", APP, "cleanup")
    assert done.returncode == 0, done.stderr
    assert triggered(redis_server) == ["cleanup"]


def test_pause_of_the_unnamed_schedule_leaves_the_named_one_running(redis_server: RedisServer) -> None:
    """Pausing ``report`` (the unnamed schedule's id) pauses that schedule
    alone, as ``--schedule report`` does; ``--actor report`` pauses every
    schedule of it."""
    assert cli(redis_server, "pause", APP, "report").returncode == 0
    assert redis_server.client().smembers(PAUSED) == {"report"}
    assert cli(redis_server, "resume", APP, "report").returncode == 0
    assert redis_server.client().smembers(PAUSED) == set()

    assert cli(redis_server, "pause", APP, "--schedule", "report").returncode == 0
    listed = json.loads(cli(redis_server, "list", APP, "--json").stdout)["schedules"]
    paused = {s["schedule"]: s["paused"] for s in listed}
    assert paused == {"report/nightly": False, "report": True, "cleanup": False}

    assert cli(redis_server, "resume", APP, "--schedule", "report").returncode == 0
    assert cli(redis_server, "pause", APP, "--actor", "report").returncode == 0
    listed = json.loads(cli(redis_server, "list", APP, "--json").stdout)["schedules"]
    paused = {s["schedule"]: s["paused"] for s in listed}
    assert paused == {"report/nightly": True, "report": True, "cleanup": False}
    # The whole actor is resumed as a whole; its unnamed schedule alone was not paused.
    assert "was not paused" in cli(redis_server, "resume", APP, "--schedule", "report").stdout
    assert cli(redis_server, "resume", APP, "--actor", "report").returncode == 0
    assert redis_server.client().smembers(PAUSED) == set()


def test_trigger_of_an_actor_with_many_runtime_schedules_is_refused_and_an_id_picks_one(
    redis_server: RedisServer,
) -> None:
    """Given ``send_report`` with 2,000 runtime schedules, When the operator
    triggers ``send_report``, Then nothing is enqueued and the error says
    how many there are and shows a few; the schedule's id triggers it."""
    add_tenants(redis_server)
    error = one_line_error(cli(redis_server, "trigger", APP, "send_report"))
    assert f"{TENANTS} schedules" in error and "send_report:tenant-0000" in error
    assert len(error) < 600  # a sentence, not 2,000 ids
    assert queued(redis_server) == []

    assert cli(redis_server, "trigger", APP, "send_report:tenant-0007").returncode == 0
    [message] = queued(redis_server)
    assert message["kwargs"] == {"tenant_id": 7}

    error = one_line_error(cli(redis_server, "pause", APP, "send_report"))
    assert "--actor send_report" in error
    assert cli(redis_server, "pause", APP, "--actor", "send_report").returncode == 0
    assert redis_server.client().smembers(PAUSED) == {"send_report:*"}


def test_an_unknown_schedule_id_is_refused(redis_server: RedisServer) -> None:
    error = one_line_error(cli(redis_server, "trigger", APP, "--schedule", "report/weekly"))
    assert "'report/weekly'" in error


# -- the dashboard ----------------------------------------------------------------


@dataclass
class Dashboard:
    server: RedisServer
    broker: RedisBroker
    middleware: CronMiddleware
    browser: Browser


@pytest.fixture
def dashboard(redis_server: RedisServer) -> Iterator[Dashboard]:
    """The report actor (every second, so the leader shows what is paused)
    with a leader thread in this process, and the dashboard on it."""
    pytest.importorskip("jinja2")
    from dramatiq_cron_middleware.web import CronDashboard

    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url, lock_ttl=1000)
    broker.add_middleware(middleware)
    cron = [Schedule("* * * * * *", name="nightly", kwargs={"full": True}), "* * * * * *"]
    dramatiq.actor(lambda full=False: None, actor_name="report", broker=broker, cron=cron)
    dramatiq.actor(lambda tenant_id=0: None, actor_name="send_report", broker=broker)
    middleware.start(broker)
    wait_for(lambda: redis_server.client().hget("{dramatiq-cron}:lease", "pid"), timeout=60, what="a leader")
    try:
        yield Dashboard(redis_server, broker, middleware, Browser(CronDashboard(broker, unauthenticated=True)))
    finally:
        middleware.stop()
        broker.close()


def row_form(page: str, schedule_id: str, action: str) -> dict[str, str]:
    """The hidden fields of a row's button form, as a browser would post them."""
    start = page.index(f'<tr data-schedule="{html.escape(schedule_id)}"')
    row = page[start : page.index("</tr>", start)]
    forms = re.findall(r"<form[^>]*>(.*?)</form>", row, re.S)
    form = next(f for f in forms if f'data-action="{action}"' in f)
    return {html.unescape(k): html.unescape(v) for k, v in re.findall(r'name="([^"]+)" value="([^"]*)"', form)}


def confirmed_form(dashboard: Dashboard, page: str, schedule_id: str, action: str) -> dict[str, str]:
    """Follow a row's link to its confirmation page (trigger and remove
    ask first) and return the fields that page's form posts."""
    start = page.index(f'<tr data-schedule="{html.escape(schedule_id)}"')
    row = page[start : page.index("</tr>", start)]
    [href] = re.findall(rf'<a[^>]*href="([^"]+)"[^>]*data-action="{action}"', row)
    confirm = dashboard.browser.get(html.unescape(href)).text
    [form] = re.findall(r"<form[^>]*>(.*?)</form>", confirm[confirm.index('id="confirm"') :], re.S)[:1]
    return {html.unescape(k): html.unescape(v) for k, v in re.findall(r'name="([^"]+)" value="([^"]*)"', form)}


def test_trigger_now_on_the_unnamed_row_triggers_the_unnamed_schedule(dashboard: Dashboard) -> None:
    page = dashboard.browser.get("/cron/schedules").text
    done = dashboard.browser.post("/cron/trigger", confirmed_form(dashboard, page, "report", "trigger"))
    assert done.status == 303
    [message] = manual(dashboard.server)
    assert message["kwargs"] == {} and message["options"]["cron_schedule"] == "report"
    assert triggered(dashboard.server) == ["report"]


def test_pause_on_the_unnamed_row_pauses_it_alone(dashboard: Dashboard) -> None:
    """The leader records the unnamed schedule's ticks as paused while the
    named one keeps firing."""
    client = dashboard.server.client()
    page = dashboard.browser.get("/cron/schedules").text
    assert dashboard.browser.post("/cron/pause", row_form(page, "report", "pause")).status == 303
    mark = client.xrevrange(HISTORY, count=1)[0][0] if client.xlen(HISTORY) else "0-0"

    def outcomes_since() -> dict[str, set[str]]:
        seen: dict[str, set[str]] = {}
        for _, f in client.xrange(HISTORY, min="(" + mark):
            seen.setdefault(f["schedule"], set()).add(f["outcome"])
        return seen

    wait_for(
        lambda: (
            {"fired"} <= outcomes_since().get("report/nightly", set())
            and {"paused"} <= outcomes_since().get("report", set())
        ),
        timeout=60,
        what="a paused tick of report and a fired tick of report/nightly",
    )
    assert "paused" not in outcomes_since()["report/nightly"]
    shown = dashboard.browser.get("/cron/schedules").text
    assert row_form(shown, "report", "resume") and row_form(shown, "report/nightly", "pause")
    assert dashboard.browser.post("/cron/resume", row_form(shown, "report", "resume")).status == 303
    assert client.smembers(PAUSED) == set()


def test_a_whole_actor_pause_shows_on_every_row_and_resumes_as_a_whole(dashboard: Dashboard) -> None:
    add_tenants(dashboard.server, 30)
    client = dashboard.server.client()
    client.sadd(PAUSED, "send_report:*")  # as ``dramatiq-cron pause APP --actor send_report`` stores it
    page = dashboard.browser.get("/cron/schedules?source=runtime").text
    form = row_form(page, "send_report:tenant-0007", "resume")
    assert form.get("actor") == "send_report" and "schedule" not in form
    assert dashboard.browser.post("/cron/resume", form).status == 303
    assert client.smembers(PAUSED) == set()


def test_a_bare_actor_name_posted_to_trigger_is_refused_with_the_choices(dashboard: Dashboard) -> None:
    """An actor name with several schedules is refused; one that is also
    an id (``report``, its unnamed schedule's) triggers that schedule."""
    add_tenants(dashboard.server, 30)
    page = dashboard.browser.get("/cron/schedules")
    csrf = dashboard.browser.cookies["cron_csrf"]
    assert page.status == 200
    refused = dashboard.browser.post("/cron/trigger", {"csrf": csrf, "actor": "send_report"})
    assert refused.status == 400 and "choose" in refused.text
    assert manual(dashboard.server) == []
    assert dashboard.browser.post("/cron/trigger", {"csrf": csrf, "actor": "report"}).status == 303
    assert [m["options"]["cron_schedule"] for m in manual(dashboard.server)] == ["report"]
