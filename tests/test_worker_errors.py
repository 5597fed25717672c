"""What a worker says when its scheduler's Redis refuses it (issue 30.8):
an authentication failure said as such, once, saying that it retries, in
words without protocol jargon; and a schedule error that names its actor."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.inprocess import in_process_app
from tests.support.instances import ROOT, stop_group, wait_for
from tests.support.redis_server import RedisServer


def _connections(server: RedisServer) -> int:
    return int(server.client(password="s3cret").info("stats")["total_connections_received"])


@pytest.mark.parametrize(
    ("userinfo", "said"),
    [
        (":wrong@", "Redis refused the cron scheduler's password (a wrong password, or the user is disabled)"),
        ("", "Redis requires a password and the cron scheduler's URL gives none"),
    ],
    ids=["wrong password", "no password"],
)
def test_a_refused_password_is_one_warning_saying_so_and_that_it_retries(
    redis_server: RedisServer, userinfo: str, said: str
) -> None:
    """Given a Redis that requires a password, When the scheduler connects
    with a wrong one or none and retries several times, Then one WARNING
    says authentication failed and that it retries, with no HELLO/RESP or
    "cannot reach" wording, and never the password."""
    redis_server.client().config_set("requirepass", "s3cret")
    url = redis_server.url.replace("redis://", f"redis://{userinfo}")
    with in_process_app(url, {"job": "* * * * * *"}, lock_ttl=2000) as app:
        # The first refusal is said (the boot's own reads may be refused
        # first: count the attempts from the WARNING on), then retried.
        wait_for(lambda: app.warnings(""), timeout=60, what="the WARNING")
        before = _connections(redis_server)
        wait_for(lambda: _connections(redis_server) >= before + 4, timeout=60, what="four more attempts")
        warned = app.warnings("")
        assert len(warned) == 1, warned
        redis_server.client(password="s3cret").config_set("requirepass", "")  # accepted now: it recovers
        wait_for(lambda: app.sent(), timeout=60, what="a tick once Redis accepts it")
        assert app.warnings("accepts the cron scheduler's password again")
    assert said in warned[0] and "retrying every" in warned[0], warned[0]
    for jargon in ("HELLO", "RESP", "cannot reach", "AuthenticationError", "wrong@"):
        assert jargon not in warned[0], warned[0]


def test_a_process_that_never_leads_says_the_same_of_a_refused_password(redis_server: RedisServer) -> None:
    redis_server.client().config_set("requirepass", "s3cret")
    url = redis_server.url.replace("redis://", "redis://:wrong@")
    with in_process_app(url, {"job": "* * * * * *"}, lock_ttl=2000, lead=False) as app:
        warned = wait_for(lambda: app.warnings("not eligible to lead"), timeout=60, what="the WARNING")
    assert "Redis refused the cron scheduler's password" in warned[0], warned
    assert "AuthenticationError" not in warned[0] and "wrong" not in warned[0].replace("a wrong password", ""), warned


@pytest.mark.parametrize(
    ("processes", "verbose"), [(1, False), (1, True), (2, False)], ids=["default", "--verbose", "two processes"]
)
def test_a_boot_error_is_one_error_line_per_process_and_its_traceback_only_at_debug(
    processes: int, verbose: bool
) -> None:
    """Given a worker whose scheduler cannot start (a malformed URL), When
    `dramatiq` boots it, Then each worker process that boots says so in one
    ERROR line that says what to do, and dramatiq stops with status 2, with no
    CRITICAL or WARNING of its own (the worker asked the main process to
    stop: issue 30) and no traceback unless DEBUG logging is on
    (`--verbose`)."""
    env = {
        **os.environ,
        "DRAMATIQ_CRON_REDIS_URL": "redis://localhost:notaport/0",
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "dramatiq", "tests.apps.cronapp", "--processes", str(processes), "--threads", "1"]
    proc = subprocess.Popen(
        [*command, *(["--verbose"] if verbose else [])],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        stop_group(proc, grace=5)
    assert proc.returncode == 2, out
    errors = [line for line in out.splitlines() if "[ERROR]" in line]
    # Each worker process that got as far as its boot says so once; one
    # the main process stopped before its boot (the first error stops them
    # all) says nothing.
    pids = [line.split("[PID ")[1].split("]")[0] for line in errors]
    assert 1 <= len(errors) <= processes and len(set(pids)) == len(pids), out
    for line in errors:
        assert "Cron scheduler cannot start, so dramatiq stops: CronMiddleware: invalid redis URL" in line, out
        assert line.endswith("Fix that and start dramatiq again (--verbose logs the traceback)."), out
    assert "[CRITICAL]" not in out and "[WARNING]" not in out, out
    assert ("Traceback" in out) is verbose, out
