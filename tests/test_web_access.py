"""Who the dashboard answers (issue 18, items 5 and 6): only the hosts it
is allowed to serve (DNS rebinding), and never without an explicit choice
about authentication."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.errors import CronConfigurationError
from tests.support.instances import ROOT, wait_for
from tests.support.redis_server import RedisServer, free_port
from tests.support.wsgi import Browser, basic

pytest.importorskip("jinja2")

from dramatiq_cron_middleware.web import CronDashboard

PAUSED = "{dramatiq-cron}:paused"


@pytest.fixture
def broker(redis_server: RedisServer) -> Iterator[RedisBroker]:
    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/1")
    broker.add_middleware(CronMiddleware(redis=redis_server.url))
    dramatiq.actor(lambda: None, actor_name="nightly", broker=broker, cron="0 3 * * *")
    try:
        yield broker
    finally:
        broker.close()


def on(host: str, **headers: str) -> dict[str, str]:
    """Request headers of a browser that reached the dashboard as ``host``."""
    return {"Host": host, **headers}


# -- item 6: no accidental unauthenticated control panel ------------------------


def test_a_dashboard_without_auth_token_or_read_only_is_refused_with_the_ways_out(broker: RedisBroker) -> None:
    """The README's Flask mount, ``CronDashboard(broker)``, fails at once
    instead of serving POST /cron/pause to anyone."""
    with pytest.raises(CronConfigurationError) as refused:
        CronDashboard(broker)
    message = str(refused.value)
    for way in ("auth=", "token=", "read_only=True", "unauthenticated=True"):
        assert way in message


def test_each_explicit_choice_is_accepted(broker: RedisBroker, redis_server: RedisServer) -> None:
    assert Browser(CronDashboard(broker, read_only=True)).get("/cron/").status == 200
    guarded = Browser(CronDashboard(broker, auth=("ops", "pw")))
    assert guarded.post("/cron/pause", {"schedule": "nightly"}).status == 401
    assert Browser(CronDashboard(broker, token="t0k3n")).get("/cron/").status == 401
    open_ = Browser(CronDashboard(broker, unauthenticated=True))
    assert open_.get("/cron/").status == 200
    assert redis_server.client().smembers(PAUSED) == set()


def test_unauthenticated_with_credentials_is_a_contradiction(broker: RedisBroker) -> None:
    with pytest.raises(CronConfigurationError, match="unauthenticated=True"):
        CronDashboard(broker, unauthenticated=True, auth=("ops", "pw"))


# -- item 5: the Host allowlist ---------------------------------------------------


def test_a_rebound_host_gets_400_and_no_csrf_token(broker: RedisBroker, redis_server: RedisServer) -> None:
    """A page on evil.example whose name was rebound to 127.0.0.1 reads
    nothing and changes nothing."""
    browser = Browser(CronDashboard(broker, unauthenticated=True))
    page = browser.get("/cron/schedules", headers=on("evil.example:8080"))
    assert page.status == 400 and "evil.example" in page.text
    assert 'name="csrf"' not in page.text and "cron_csrf" not in browser.cookies
    # Even with a token obtained elsewhere and a matching Origin.
    token = csrf_of(browser.get("/cron/schedules", headers=on("127.0.0.1:8080")).text)
    forged = browser.post(
        "/cron/pause",
        {"csrf": token, "schedule": "nightly"},
        headers=on("evil.example:8080", Origin="http://evil.example:8080"),
    )
    assert forged.status == 400
    assert redis_server.client().smembers(PAUSED) == set()


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "127.0.0.1:45123", "[::1]:8080", "LOCALHOST:1"])
def test_loopback_names_are_allowed_by_default_on_any_port(broker: RedisBroker, host: str) -> None:
    assert Browser(CronDashboard(broker, unauthenticated=True)).get("/cron/", headers=on(host)).status == 200


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example", "localhost.evil.example:80", "[::2]"])
def test_other_hosts_are_refused_by_default(broker: RedisBroker, host: str) -> None:
    assert Browser(CronDashboard(broker, unauthenticated=True)).get("/cron/", headers=on(host)).status == 400


def test_allowed_hosts_replace_the_default_as_djangos_do(broker: RedisBroker) -> None:
    dashboard = CronDashboard(broker, unauthenticated=True, allowed_hosts=["cron.example.com", ".ops.example"])
    browser = Browser(dashboard)
    assert browser.get("/cron/", headers=on("cron.example.com")).status == 200
    assert browser.get("/cron/", headers=on("cron.example.com:8443")).status == 200
    assert browser.get("/cron/", headers=on("ops.example")).status == 200
    assert browser.get("/cron/", headers=on("eu.ops.example")).status == 200
    assert browser.get("/cron/", headers=on("example.com")).status == 400
    assert browser.get("/cron/", headers=on("localhost")).status == 400
    assert (
        Browser(CronDashboard(broker, unauthenticated=True, allowed_hosts=["*"]))
        .get("/cron/", headers=on("anything.example"))
        .status
        == 200
    )


def test_allowed_hosts_must_be_a_list_of_names(broker: RedisBroker) -> None:
    with pytest.raises(CronConfigurationError, match="allowed_hosts"):
        CronDashboard(broker, unauthenticated=True, allowed_hosts="cron.example.com")  # type: ignore[arg-type]


def test_a_post_must_come_from_the_host_it_is_sent_to(broker: RedisBroker, redis_server: RedisServer) -> None:
    """Both names allowed, but a form of one origin posted to the other is
    still cross-origin."""
    browser = Browser(CronDashboard(broker, unauthenticated=True))
    token = csrf_of(browser.get("/cron/schedules", headers=on("localhost:8080")).text)
    form = {"csrf": token, "schedule": "nightly"}
    crossed = browser.post("/cron/pause", form, headers=on("localhost:8080", Origin="http://127.0.0.1:8080"))
    assert crossed.status == 403
    same = browser.post("/cron/pause", form, headers=on("localhost:8080", Origin="http://localhost:8080"))
    assert same.status == 303
    assert redis_server.client().smembers(PAUSED) == {"nightly"}


def csrf_of(page: str) -> str:
    import re

    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


# -- the standalone command -------------------------------------------------------


def serve(redis_server: RedisServer, *args: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRAMATIQ_CRON_REDIS_URL": redis_server.url}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dramatiq_cron_middleware",
            "web",
            "tests.apps.cronapp",
            "--bind",
            f"127.0.0.1:{port}",
            *list(args),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    line = wait_for(process.stdout.readline, timeout=30, what="the dashboard to serve")
    assert "Serving the cron dashboard" in line, line
    return process, port


def get(port: int, host: str, **headers: Any) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/", headers={"Host": host, **headers})
        return connection.getresponse().status
    finally:
        connection.close()


def test_dramatiq_cron_web_answers_loopback_names_and_the_allowed_hosts_only(redis_server: RedisServer) -> None:
    process, port = serve(redis_server, "--allowed-host", "cron.internal", "--auth", "ops:pw")
    try:
        auth = basic("ops", "pw")
        assert get(port, f"127.0.0.1:{port}", **auth) == 200
        assert get(port, f"localhost:{port}", **auth) == 200
        assert get(port, f"cron.internal:{port}", **auth) == 200
        assert get(port, f"evil.example:{port}", **auth) == 400
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
