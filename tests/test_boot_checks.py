"""What can be checked at boot is checked at boot: a malformed Redis URL
stops the worker with one clear error and no credentials, fast takeover
without permission falls back with one WARNING, and an eviction policy
that can drop the scheduler's keys is reported once."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import MiddlewareError

from dramatiq_cron_middleware import CronConfigurationError, CronMiddleware
from dramatiq_cron_middleware.store.connection import redact
from tests.support.inprocess import in_process_app
from tests.support.instances import ROOT, stop_group, wait_for
from tests.support.redis_server import RedisServer

SECRETS = ["pa/ss", "pa?ss", "pa#ss", "pa ss", "p@ss/w?rd#x y"]


@pytest.mark.parametrize("password", SECRETS)
def test_redaction_hides_any_userinfo_whatever_it_contains(password: str) -> None:
    text = f"Error connecting to redis://user:{password}@db.example:6379/0: refused"
    out = redact(text)
    assert password not in out and "pa" not in out.split("***")[0][-3:]
    assert out.endswith("@db.example:6379/0: refused")


@pytest.mark.parametrize("password", SECRETS)
def test_a_malformed_url_fails_before_the_worker_boots_naming_no_password(password: str) -> None:
    """The URL is parsed in before_worker_boot (a MiddlewareError there
    stops dramatiq's worker), not in after_worker_boot (whose exceptions
    dramatiq only logs, leaving a worker with no scheduler)."""
    broker = StubBroker()
    middleware = CronMiddleware(redis=f"redis://user:{password}@localhost:notaport/0")
    broker.add_middleware(middleware)
    dramatiq.actor(lambda: None, actor_name="job", broker=broker, cron="* * * * *")
    with pytest.raises(CronConfigurationError) as raised:
        middleware.before_worker_boot(broker, None)  # type: ignore[arg-type]
    assert password not in str(raised.value)
    assert "redis://***@" in str(raised.value)


def test_a_worker_with_a_malformed_url_exits_at_boot_with_one_error(tmp_path: Any) -> None:
    env = {
        "DRAMATIQ_CRON_REDIS_URL": "redis://user:se cr/et?x@localhost:notaport/0",
        "CRON_APP_RECORD": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "tests.apps.cronapp", "--processes", "1", "--threads", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        stop_group(proc, grace=5)
    output = out
    assert proc.returncode != 0, output[-2000:]
    assert "invalid redis URL" in output, output[-2000:]
    assert "se cr" not in output and "et?x" not in output
    assert "Worker process is ready for action" not in output


def test_fast_takeover_without_the_client_command_falls_back_to_the_lease(redis_server: RedisServer) -> None:
    """Given an ACL user that may not run CLIENT (a managed Redis, a strict
    ACL), when fast_takeover is on, then the scheduler still leads and
    fires, and says once that it falls back to lease-only takeover.  (The
    old leader raised NoPermissionError on every acquire: nobody ever led.)"""
    admin = redis_server.client()
    admin.execute_command("ACL", "SETUSER", "cron", "on", ">s3cret", "~*", "&*", "+@all", "-client")
    url = redis_server.url.replace("redis://", "redis://cron:s3cret@")
    with in_process_app(url, {"job": "* * * * * *"}, lock_ttl=2000, fast_takeover=200) as app:
        wait_for(lambda: len(app.sent()) >= 2, timeout=60, what="fires without CLIENT")
        assert len(app.warnings("fast_takeover needs the CLIENT command")) == 1, app.warnings()
        assert not any("s3cret" in line for line in app.logged(""))


def test_an_eviction_policy_that_can_drop_the_ledger_is_reported_once(redis_server: RedisServer) -> None:
    redis_server.client().config_set("maxmemory-policy", "allkeys-lru")
    with in_process_app(redis_server.url, {"job": "* * * * * *"}) as app:
        wait_for(lambda: len(app.sent()) >= 2, timeout=60, what="fires")
        warned = app.warnings("maxmemory-policy allkeys-lru")
        assert len(warned) == 1 and "noeviction" in warned[0]


def test_a_failing_schedule_warns_once_and_never_flaps_with_the_others(redis_server: RedisServer) -> None:
    """Given one actor whose enqueue a middleware always vetoes and another
    that works, when both fire every second for several seconds, then one
    WARNING says the first one fails and none says it works again.  (The
    old per-process flag logged a fails/works-again pair every tick.)"""

    class Vetoed(MiddlewareError):
        """dramatiq lets a MiddlewareError from before_enqueue through."""

    class Veto(dramatiq.Middleware):
        def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
            if message.actor_name == "vetoed":
                raise Vetoed("vetoed by policy")

    with in_process_app(redis_server.url, {"vetoed": "* * * * * *", "fine": "* * * * * *"}, start=False) as app:
        app.broker.add_middleware(Veto())
        app.middleware.start(app.broker)
        wait_for(lambda: len(app.sent("fine")) >= 4, timeout=60, what="four fires of the working schedule")
        fails = app.warnings("Enqueueing fails")
        assert len(fails) == 1 and "vetoed" in fails[0], app.warnings()
        assert not app.warnings("works again"), app.warnings()


def test_a_server_without_lua_scripting_gets_one_clear_error() -> None:
    """Given a server whose EVAL and EVALSHA are renamed away (as a server
    without scripting, such as Valkey without its Lua engine, answers),
    then the scheduler logs one ERROR saying what it needs, without a
    traceback, however many times it retries, and fires nothing."""
    with RedisServer(extra=["--rename-command", "EVAL", "", "--rename-command", "EVALSHA", ""]) as server:
        probe = server.client()

        def refused_calls() -> int:
            stats: Any = probe.info("errorstats")
            return int(stats.get("errorstat_ERR", {}).get("count", 0))

        with in_process_app(server.url, {"ping": "* * * * * *"}, lock_ttl=1000) as app:
            wait_for(lambda: app.errors(), timeout=30, what="the scheduler's error")
            seen = refused_calls()
            wait_for(lambda: refused_calls() >= seen + 4, timeout=30, what="the scheduler to retry a few times")
            errors = [r for r in app.records() if r.levelno >= logging.ERROR]
            said = "Redis cannot run the cron scheduler's Lua scripts (unknown command 'EVALSHA')"
            assert [r.getMessage()[: len(said)] for r in errors] == [said], [r.getMessage() for r in errors]
            assert not errors[0].exc_info and "EVAL, EVALSHA and SCRIPT" in errors[0].getMessage()
            assert app.sent() == []
