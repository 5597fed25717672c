"""Isolation: apps sharing a Redis, credentials, and deserialisation."""

from __future__ import annotations

import ast
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dramatiq_cron_middleware
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.chaos

PACKAGE = Path(dramatiq_cron_middleware.__file__).parent


def test_two_apps_with_different_prefixes_on_one_redis_do_not_see_each_other(
    redis_server: RedisServer, instances: Callable[..., Instance], tmp_path: Any
) -> None:
    """Given apps "alpha" and "beta" on one Redis, each with two instances,
    then each keeps its keys under its own hash tag, each fires its own
    ticks exactly once, each has its own leader at the same time, and
    deleting alpha's lease changes nothing for beta."""
    histories = {}
    started: list[Instance] = []
    for prefix in ("alpha", "beta"):
        record = tmp_path / prefix
        record.mkdir()
        histories[prefix] = History(str(record))
        env = {
            "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
            "CRON_APP_RECORD": str(record),
            "CRON_APP_TTL": "1500",
            "CRON_APP_PREFIX": prefix,
        }
        started += [instances(env), instances(env)]
    client = redis_server.client()
    wait_for(
        lambda: client.exists("{alpha}:lease") and client.exists("{beta}:lease"), timeout=30, what="both apps to lead"
    )
    start = now_ms()
    beta_epoch = client.hget("{beta}:lease", "epoch")
    wait_for(lambda: all(h.ticks() and h.ticks()[-1] > start for h in histories.values()), timeout=30, what="fires")

    # When alpha loses its lease twice, beta's leader is untouched.
    for _ in range(2):
        client.delete("{alpha}:lease")
        wait_for(lambda: client.exists("{alpha}:lease"), timeout=30, what="alpha to lead again")
    end = now_ms() + 2000
    wait_for(
        lambda: all(h.ticks() and h.ticks()[-1] > end for h in histories.values()), timeout=30, what="both to fire on"
    )
    assert client.hget("{beta}:lease", "epoch") == beta_epoch, "alpha's trouble moved beta's lease"

    keys = client.keys("*")
    assert keys and all(str(k).startswith(("{alpha}:", "{beta}:")) for k in keys), keys
    ids = {p: {e.message_id for e in h.enqueues()} for p, h in histories.items()}
    assert not ids["alpha"] & ids["beta"], "the two apps share message ids"
    for prefix, history in histories.items():
        schedules = {e.schedule for e in history.enqueues()}
        verdict = history.judge(schedules=schedules, start_ms=start, end_ms=end)
        assert verdict.expected and not verdict.duplicates and not verdict.losses, f"{prefix}: {verdict.summary()}"
    client.close()
    # Stop all four at once: a graceful dramatiq stop takes a couple of
    # seconds, and the fixture would stop them one after the other.
    for instance in started:
        instance.signal(signal.SIGTERM)
    for instance in started:
        assert instance.proc is not None
        instance.proc.wait(20)


def test_credentials_in_the_redis_url_never_reach_the_logs(instances: Callable[..., Instance], record_dir: str) -> None:
    """Given a Redis with an ACL user that has a password, one instance
    with the right password and one with a wrong one, when Redis then goes away, then
    neither password appears anywhere in the logs, though both instances
    logged the trouble."""
    password, wrong = "s3cret-Pw-91e2", "wr0ng-Pw-77ab"
    with RedisServer(extra=["--user", "cron", "on", f">{password}", "~*", "&*", "+@all"]) as server:
        base = {"CRON_APP_RECORD": record_dir, "CRON_APP_TTL": "1500"}
        good = instances({**base, "DRAMATIQ_CRON_REDIS_URL": f"redis://cron:{password}@127.0.0.1:{server.port}/0"})
        bad = instances({**base, "DRAMATIQ_CRON_REDIS_URL": f"redis://cron:{wrong}@127.0.0.1:{server.port}/0"})
        wait_for(lambda: "Acquired cron leadership" in good.log(), timeout=30, what="the good instance to lead")
        wait_for(
            lambda: "Redis refused the cron scheduler's password" in bad.log(),
            timeout=30,
            what="the bad instance to report the refused password",
        )
    # Redis is gone now.
    wait_for(lambda: "cannot reach Redis" in good.log(), timeout=30, what="the good instance to report")
    for instance in (good, bad):  # stopped together: each graceful stop takes a second or two
        instance.signal(signal.SIGTERM)
    for instance in (good, bad):
        assert instance.proc is not None
        instance.proc.wait(20)
        log = instance.log()
        assert password not in log and wrong not in log, f"a password leaked into {instance.log_path}"
        assert "Traceback" not in log


def test_the_package_never_deserialises_with_pickle() -> None:
    """Nothing the scheduler reads from Redis is unpickled: every value is
    a plain string it parses itself (messages are encoded by dramatiq's
    encoder, JSON by default).  A guard over the package source."""
    unsafe = {"pickle", "cPickle", "dill", "marshal", "shelve", "jsonpickle"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                names = [node.func.id]
            found += [
                f"{os.path.relpath(path, PACKAGE)}:{getattr(node, 'lineno', 0)} {n}"
                for n in names
                if n in unsafe | {"eval", "exec"}
            ]
    assert not found, f"unsafe deserialisation in the package: {found}"
