"""The dashboard in a real headless Chromium, against real dramatiq workers:
the standalone server (``dramatiq-cron web``) of the test app, clicked
through with selenium.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs
them): skipped locally when missing, a failure in CI.  Set
``CRON_DASHBOARD_SCREENSHOTS=docs`` to save a screenshot of each page.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.components import missing, require_module
from tests.support.instances import ROOT, Instance, stop_group
from tests.support.redis_server import RedisServer, free_port

TOKEN = "browser-test-token"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCHEDULE = "tick_0"


@pytest.fixture
def browser() -> Iterator[Any]:
    require_module("selenium", install="pip install selenium")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            missing(f"{path} is missing (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="cron-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # No network here: without these Chromium keeps trying to reach
    # Google's services and floods the log with refused connections.
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def dashboard(redis_server: RedisServer, record_dir: str, instances: Callable[..., Instance]) -> Iterator[str]:
    """Two worker processes of the test app and its standalone dashboard;
    yields the dashboard's URL."""
    env = {
        "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
        "CRON_APP_BROKER": f"redis://127.0.0.1:{redis_server.port}/1",
        "CRON_APP_RECORD": record_dir,
        "CRON_APP_TTL": "2000",
    }
    instances(env, processes=2)
    yield from _serve(env)


@pytest.fixture
def guarded_dashboard(redis_server: RedisServer) -> Iterator[str]:
    """The test app's standalone dashboard alone (no workers), its token
    given in the environment; yields its URL."""
    env = {
        "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
        "CRON_APP_BROKER": f"redis://127.0.0.1:{redis_server.port}/1",
        "DRAMATIQ_CRON_WEB_TOKEN": TOKEN,
    }
    yield from _serve(env)


def _serve(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "dramatiq_cron_middleware", "web", "tests.apps.cronapp", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "Serving the cron dashboard" in line, line + server.stdout.read()
        url = re.search(r"http://\S+/", line)
        assert url is not None
        yield url.group(0).rstrip("/")
    finally:
        stop_group(server, grace=5)


def _wait(driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = 15) -> Any:
    """Poll ``condition`` until it holds, failing after ``timeout`` s naming ``what``."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page being replaced under the poll can raise either.
    ignored = [StaleElementReferenceException, WebDriverException]
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=ignored).until(condition, message=what)


def _submit(driver: Any, button: Any) -> None:
    """Click a form's button and wait until the answer replaced the page (a
    mark set on this page's window is gone in the next one)."""
    driver.execute_script("window.cronOldPage = true;")
    button.click()
    _wait(
        driver,
        lambda d: d.execute_script("return !window.cronOldPage && document.readyState === 'complete';"),
        "the form's answer",
    )


def _shot(driver: Any, name: str) -> None:
    folder = os.environ.get("CRON_DASHBOARD_SCREENSHOTS")
    if folder:
        driver.save_screenshot(str(Path(ROOT, folder, f"dashboard-{name}.png")))


def test_an_operator_sees_the_leader_pauses_resumes_triggers_and_manages_runtime_schedules(
    browser: Any, dashboard: str, redis_server: RedisServer
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def wait(condition: Callable[[Any], Any], what: str, timeout: float = 15) -> Any:
        return _wait(browser, condition, what, timeout)

    def submit(button: Any) -> None:
        _submit(browser, button)

    def reloaded(find: Callable[[], Any]) -> Callable[[Any], Any]:
        def check(driver: Any) -> Any:
            driver.refresh()
            return find()

        return check

    def texts(selector: str) -> list[str]:
        return [e.text for e in browser.find_elements(By.CSS_SELECTOR, selector)]

    client = redis_server.client()
    history_url = f"{dashboard}/schedule?id={quote(SCHEDULE)}"

    # The overview shows the leader the lease names.
    browser.get(dashboard + "/")
    lease = wait(lambda _: client.hgetall("{dramatiq-cron}:lease") or None, "a leader")
    wait(
        reloaded(lambda: browser.find_elements(By.ID, "leader-pid")),
        "the leader on the overview",
    )
    assert browser.find_element(By.ID, "leader-pid").text == lease["pid"]
    assert browser.find_element(By.ID, "leader-epoch").text == lease["epoch"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#candidates tbody tr")) == 2
    _shot(browser, "overview")

    # Pause: the row says so, and the leader records its ticks as paused.
    browser.get(dashboard + "/schedules")
    _shot(browser, "schedules")
    submit(browser.find_element(By.CSS_SELECTOR, f'button[data-action="pause"][data-target="{SCHEDULE}"]'))
    wait(lambda d: "Paused" in d.find_element(By.CSS_SELECTOR, ".notice").text, "the pause notice")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-schedule="{SCHEDULE}"]')
    assert row.find_element(By.CSS_SELECTOR, ".badge.paused").text == "paused"
    browser.get(history_url)
    wait(
        reloaded(lambda: browser.find_elements(By.CSS_SELECTOR, 'tr.entry[data-outcome="paused"]')),
        "a tick recorded as paused",
    )

    # Resume, then trigger now: the history shows "triggered".
    submit(browser.find_element(By.CSS_SELECTOR, 'button[data-action="resume"]'))
    wait(lambda d: d.find_element(By.ID, "paused-state").text == "no", "the schedule resumed")
    submit(browser.find_element(By.CSS_SELECTOR, 'a[data-action="trigger"]'))
    submit(browser.find_element(By.CSS_SELECTOR, 'button[data-action="confirm"]'))  # asked first
    wait(lambda d: "Triggered" in d.find_element(By.CSS_SELECTOR, ".notice").text, "the trigger notice")
    wait(
        reloaded(lambda: "triggered" in texts("tr.entry .outcome")),
        "the history to show the trigger",
    )

    def fired_after_the_pause() -> bool:
        seen = texts("tr.entry .outcome")  # newest first
        return "fired" in seen and "paused" in seen and seen.index("fired") < seen.index("paused")

    wait(reloaded(fired_after_the_pause), "ticks firing again after the resume")
    _shot(browser, "history")

    # A runtime schedule: add it through the form, see it, remove it.
    browser.get(dashboard + "/runtime/new")
    Select(browser.find_element(By.NAME, "actor")).select_by_value("tick_0")
    browser.find_element(By.NAME, "name").send_keys("from-browser")
    browser.find_element(By.NAME, "expression").send_keys("61 * * * *")
    submit(browser.find_element(By.CSS_SELECTOR, "#runtime-form button[type=submit]"))
    error = wait(lambda d: d.find_elements(By.ID, "form-error"), "the validation error")[0]
    assert "out of range" in error.text
    _shot(browser, "runtime-form")
    expression = browser.find_element(By.NAME, "expression")
    expression.clear()
    expression.send_keys("* * * * * *")
    submit(browser.find_element(By.CSS_SELECTOR, "#runtime-form button[type=submit]"))
    added = 'tr[data-schedule="tick_0:from-browser"]'
    wait(lambda d: d.find_elements(By.CSS_SELECTOR, added), "the runtime schedule listed")
    submit(browser.find_element(By.CSS_SELECTOR, f'{added} a[data-action="remove"]'))
    submit(browser.find_element(By.CSS_SELECTOR, 'button[data-action="confirm"]'))
    wait(lambda d: "Removed" in d.find_element(By.CSS_SELECTOR, ".notice").text, "the removal notice")
    assert not browser.find_elements(By.CSS_SELECTOR, added)


def test_a_runtime_schedule_added_in_the_browser_fires_until_removed(browser: Any, dashboard: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def outcomes(driver: Any) -> list[str]:
        driver.refresh()
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "tr.entry .outcome")]

    browser.get(dashboard + "/runtime/new")
    Select(browser.find_element(By.NAME, "actor")).select_by_value("tick_0")
    browser.find_element(By.NAME, "name").send_keys("fires")
    browser.find_element(By.NAME, "expression").send_keys("* * * * * *")
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "#runtime-form button[type=submit]"))
    browser.get(f"{dashboard}/schedule?id={quote('tick_0:fires')}")
    _wait(browser, lambda d: "fired" in outcomes(d), "the runtime schedule to fire", timeout=20)
    _submit(browser, browser.find_element(By.CSS_SELECTOR, 'a[data-action="remove"]'))
    _submit(browser, browser.find_element(By.CSS_SELECTOR, 'button[data-action="confirm"]'))
    assert "Removed" in browser.find_element(By.CSS_SELECTOR, ".notice").text


# The widths every new flow is walked at: a laptop, and a phone.
WIDTHS = {"desktop": 1366, "phone": 390}


def _at_width(driver: Any, width: int) -> None:
    """Lay pages out as a screen ``width`` CSS pixels wide (a phone's when
    narrow), whatever the headless window's own limits."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 844 if width < 700 else 900, "deviceScaleFactor": 1, "mobile": width < 700},
    )


def _fits(driver: Any, width: int, what: str) -> None:
    """The page is laid out for a screen ``width`` wide, and is no wider
    than it (nothing scrolls sideways)."""
    wide, inner = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
    assert inner == width, f"{what} is laid out {inner}px wide, not {width}px"
    assert wide <= inner, f"{what} is {wide}px wide on a {inner}px screen"


@pytest.mark.slow
def test_an_operator_confirms_a_remove_sees_it_audited_and_pages_10000_schedules_on_a_laptop_and_a_phone(
    browser: Any, guarded_dashboard: str, redis_server: RedisServer
) -> None:
    """Given 10,000 runtime schedules, At 1366 and at 390 px wide: the
    visitor pages to the last page and back in natural order, finds a row's
    actions, removes a schedule through its confirmation page, sees the
    removal with its user in the history, and no page is wider than the
    screen."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from selenium.webdriver.common.by import By

    from dramatiq_cron_middleware import CronMiddleware

    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="tick_0", broker=broker)
    middleware.runtime.add_many(("tick_0", "0 4 * * *", f"tenant-{i}") for i in range(10_000))
    broker.close()

    def wait(condition: Callable[[Any], Any], what: str) -> Any:
        return _wait(browser, condition, what)

    def visit(path: str, what: str) -> None:
        browser.get(guarded_dashboard + path)
        _fits(browser, width, what)

    def follow(rel: str) -> list[str]:
        _submit(browser, browser.find_element(By.CSS_SELECTOR, f'nav.pages a[rel="{rel}"]'))
        _fits(browser, width, f"the {rel} page")
        # The page's rows in one round trip (one per row was 200 a page).
        rows: list[str] = browser.execute_script(
            "return Array.from(document.querySelectorAll('tr[data-schedule]'), row => row.dataset.schedule)"
        )
        return rows

    browser.get(f"{guarded_dashboard}/?token={TOKEN}")  # kept in a cookie from now on
    removed: set[str] = set()
    for device, width in WIDTHS.items():
        _at_width(browser, width)
        visit("/", "the overview")
        _shot(browser, f"overview-{device}")
        visit("/next", "the next-to-run view")
        visit("/runtime/new", "the add form")

        # Page to the end and back: 200 rows a page, natural order.
        visit("/schedules?source=runtime&per_page=200", "the schedules page")
        _shot(browser, f"schedules-{device}")
        names = [f"tick_0:tenant-{i}" for i in range(10_000) if f"tick_0:tenant-{i}" not in removed]
        pages = [names[i : i + 200] for i in range(0, len(names), 200)]
        assert follow("last") == pages[-1]
        assert follow("prev") == pages[-2]
        assert follow("next") == pages[-1]
        assert follow("first") == pages[0]
        assert follow("next") == pages[1]

        # A row's action button is on screen and within reach.
        victim = f"tick_0:tenant-{1 if device == 'desktop' else 2}"
        visit(f"/schedules?source=runtime&q=tenant-{victim.rsplit('-', 1)[1]}", "a search")
        remove = browser.find_element(By.CSS_SELECTOR, f'a[data-action="remove"][data-target="{victim}"]')
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", remove)
        box = remove.rect
        assert remove.is_displayed() and 0 <= box["x"] and box["x"] + box["width"] <= width, box

        # Remove asks first, on a page of its own; the history names who.
        _submit(browser, remove)
        _fits(browser, width, "the confirmation page")
        _shot(browser, f"confirm-{device}")
        assert f"Remove {victim}?" in browser.find_element(By.TAG_NAME, "h1").text
        _submit(browser, browser.find_element(By.CSS_SELECTOR, 'button[data-action="confirm"]'))
        wait(lambda d: "Removed" in d.find_element(By.CSS_SELECTOR, ".notice").text, "the removal notice")
        visit(f"/schedule?id={quote(victim)}", "the history")
        entry = browser.find_element(By.CSS_SELECTOR, 'tr.entry[data-outcome="remove"]')
        assert "by token" in entry.text
        removed.add(victim)
        _shot(browser, f"history-{device}")


def test_health_shows_on_the_overview_the_schedules_and_a_schedules_runs(browser: Any, dashboard: str) -> None:
    """Given the test app's schedule running well, Then the overview says
    there is no problem, its row shows ``ok``, the health filter keeps it
    or leaves nothing, and its page lists its runs under a duration chart;
    at 390 px the runs and the filtered schedules are stacked rows, each
    cell labelled, and fit the screen."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def reloaded(find: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def check(driver: Any) -> Any:
            driver.refresh()
            return find(driver)

        return check

    browser.get(dashboard + "/")
    _wait(
        browser,
        reloaded(
            lambda d: (
                d.find_element(By.ID, "health-summary").text == "no problems"
                and "ok" in d.find_element(By.ID, "health-counts").text
            )
        ),
        "no problems on the overview",
        timeout=20,
    )

    browser.get(dashboard + "/schedules")
    _wait(
        browser,
        reloaded(lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-schedule="{SCHEDULE}"] .health').text == "ok"),
        "the schedule's health in its row",
    )
    assert not browser.find_elements(By.ID, "problems")
    Select(browser.find_element(By.NAME, "health")).select_by_value("failing")
    _submit(browser, browser.find_element(By.CSS_SELECTOR, ".filters button[type=submit]"))
    assert "No schedule matches." in browser.find_element(By.ID, "schedules").text
    Select(browser.find_element(By.NAME, "health")).select_by_value("ok")
    _submit(browser, browser.find_element(By.CSS_SELECTOR, ".filters button[type=submit]"))
    assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-schedule="{SCHEDULE}"]')

    browser.get(f"{dashboard}/schedule?id={quote(SCHEDULE)}")
    _wait(
        browser,
        reloaded(lambda d: len(d.find_elements(By.CSS_SELECTOR, 'tr.run-row[data-outcome="succeeded"]')) >= 2),
        "two succeeded runs in the runs table",
    )
    assert browser.find_element(By.ID, "health-state").text.startswith("Health: ok")
    bars = browser.find_elements(By.CSS_SELECTOR, '#runs svg.chart rect[data-outcome="succeeded"]')
    assert len(bars) == len(browser.find_elements(By.CSS_SELECTOR, 'tr.run-row[data-outcome="succeeded"]'))
    # (of a finished run: the newest row can be a tick enqueued but not yet
    # started, which no worker host or pid has yet)
    cells = browser.find_elements(By.CSS_SELECTOR, 'tr.run-row[data-outcome="succeeded"] td')
    host, pid = (c.text for c in cells[5:7])
    assert host and pid.isdigit()
    _shot(browser, "runs")

    phone = WIDTHS["phone"]
    _at_width(browser, phone)
    browser.refresh()
    _fits(browser, phone, "a schedule's runs")
    assert not browser.find_element(By.CSS_SELECTOR, "#runs-table thead").is_displayed()
    # A finished run's: the newest run may still be running (tick_0 fires
    # every second), and a phone hides its empty Duration cell.
    cell = browser.find_element(By.CSS_SELECTOR, 'tr.run-row[data-outcome="succeeded"] td[data-label="Duration"]')
    assert cell.is_displayed() and 0 <= cell.rect["x"] and cell.rect["x"] + cell.rect["width"] <= phone, cell.rect
    _shot(browser, "runs-phone")
    browser.get(dashboard + "/schedules?health=ok")
    _fits(browser, phone, "the schedules filtered by health")
    health = browser.find_element(By.CSS_SELECTOR, f'tr[data-schedule="{SCHEDULE}"] td[data-label="Health"]')
    # (tick_0 fires every second: its last run may be running right now)
    assert health.is_displayed() and re.fullmatch(r"ok last run: (succeeded|running|pending)", health.text), health.text


def test_every_action_of_a_schedules_row_is_on_screen_at_1366_1280_and_390_px(
    browser: Any, dashboard: str, redis_server: RedisServer
) -> None:
    """Given a leader firing tick_0 and a runtime schedule with a long name
    and a description, At 1366, 1280 and 390 px wide, Then the schedules
    table is no wider than the screen and every action button of every row
    lies within it, without a sideways scroll."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from selenium.webdriver.common.by import By

    from dramatiq_cron_middleware import CronMiddleware, Schedule

    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    middleware = CronMiddleware(redis=redis_server.url)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="tick_0", broker=broker)
    middleware.runtime.add(
        "tick_0",
        Schedule(
            "0,15,30,45 8-18 * * mon-fri",
            name="tenant-0042-nightly-report",
            description="The nightly report of tenant 42",
            timezone="America/Argentina/Buenos_Aires",
        ),
        name="tenant-0042-nightly-report",
    )
    middleware.pause("tick_0:tenant-0042-nightly-report", duration="1h")  # the widest Paused cell
    broker.close()

    def fired(driver: Any) -> bool:  # a page shows what was fired when it was built: ask again
        driver.get(dashboard + "/schedules")
        return "last enqueued" in driver.page_source

    _wait(browser, fired, "tick_0 to fire", timeout=60)
    for width in (1366, 1280, 390):
        _at_width(browser, width)
        browser.get(dashboard + "/schedules")
        _fits(browser, width, f"the schedules page at {width}px")
        table = browser.find_element(By.ID, "schedules").rect
        assert table["x"] >= 0 and table["x"] + table["width"] <= width, (width, table)
        rows = browser.find_elements(By.CSS_SELECTOR, "#schedules tr[data-schedule]")
        assert len(rows) == 2
        for row in rows:
            buttons = row.find_elements(By.CSS_SELECTOR, "td.actions button, td.actions a.button")
            assert len(buttons) == (
                4 if row.get_attribute("data-schedule") == "tick_0:tenant-0042-nightly-report" else 2
            )
            for button in buttons:
                browser.execute_script(
                    "window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY - 100);", button
                )
                box = browser.execute_script(
                    "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, window.scrollX];", button
                )
                assert button.is_displayed() and box[2] == 0 and 0 <= box[0] and box[1] <= width, (
                    width,
                    button.text,
                    box,
                )
