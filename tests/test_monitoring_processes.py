"""Run monitoring end to end: real redis-server, real ``dramatiq`` worker
processes of tests/apps/monitorapp.py (every schedule fires each second,
lease 1 s, grace 1 s)."""

from __future__ import annotations

import glob
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.runs import ALIVE_MS
from tests.support.instances import ROOT, Instance, wait_for
from tests.support.redis_server import RedisServer, free_port
from tests.support.stores import read_runs

APP = "tests.apps.monitorapp"
KEYS = Keys("dramatiq-cron")

Start = Callable[..., Instance]


def env_for(server: RedisServer, record_dir: str, actors: str, **extra: str) -> dict[str, str]:
    return {"DRAMATIQ_CRON_REDIS_URL": server.url, "MON_RECORD": record_dir, "MON_ACTORS": actors, **extra}


def alerts(record_dir: str) -> list[dict[str, Any]]:
    """Every alert ``on_alert`` got, in every process, oldest first."""
    found = []
    for path in glob.glob(os.path.join(record_dir, "alerts-*.jsonl")):
        found += [json.loads(line) for line in Path(path).read_text().splitlines()]
    return sorted(found, key=lambda a: a["at"])


def states(record_dir: str, schedule: str) -> list[tuple[str, str]]:
    return [(a["previous"], a["state"]) for a in alerts(record_dir) if a["schedule"] == schedule]


def facts(server: RedisServer, schedule: str) -> dict[str, Any]:
    """The leader's stored health facts of a schedule."""
    value = server.client().hget(KEYS.health, schedule)
    return json.loads(value) if value else {}


def runs(server: RedisServer, schedule: str) -> list[Any]:
    client, _ = scheduler_clients(server.url, op_timeout_ms=1000, block_timeout_ms=0)
    try:
        return read_runs(client, KEYS, schedule, limit=100)
    finally:
        client.close()


def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``dramatiq-cron check APP --json`` as a probe runs it."""
    return subprocess.run(
        [sys.executable, "-m", "dramatiq_cron_middleware", "check", APP, "--json"],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def health_in_check(env: dict[str, str], schedule: str) -> tuple[int, str]:
    result = check(env)
    data = json.loads(result.stdout)
    [entry] = [s for s in data["schedules"] if s["id"] == schedule]
    return result.returncode, entry["health"]


def test_a_failing_actor_alerts_once_when_failing_and_once_when_ok_again(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Given an actor that raises on every run (threshold 2), When it has
    failed twice, Then one ``failing`` alert carries the error and ``check``
    exits 2; When it is fixed, Then exactly one ``ok`` alert follows, and
    none while it stays ok."""
    env = env_for(redis_server, record_dir, "flaky")
    instances(env, app=APP)
    wait_for(lambda: states(record_dir, "flaky"), timeout=20, what="a first alert")
    [failing] = alerts(record_dir)
    # "pending" when its first runs were decided in one turn, else "ok".
    assert failing["previous"] in ("pending", "ok") and failing["state"] == "failing"
    assert failing["error"] == "RuntimeError: flaky failed" and failing["tick"]
    assert health_in_check(env, "flaky") == (2, "failing")
    failed = [r for r in runs(redis_server, "flaky") if r.outcome == "failed"]
    assert len(failed) >= 2 and failed[0].error == "RuntimeError: flaky failed"

    Path(record_dir, "fixed").touch()
    wait_for(lambda: len(states(record_dir, "flaky")) == 2, timeout=20, what="the ok alert")
    # A further success decided after the ok: still no further alert.
    wait_for(lambda: _succeeded_after_ok(redis_server), timeout=20, what="a success decided after the ok")
    assert states(record_dir, "flaky") == [(failing["previous"], "failing"), ("failing", "ok")]
    assert health_in_check(env, "flaky") == (0, "ok")


def _succeeded_after_ok(server: RedisServer) -> bool:
    """A run that started after the ok alert succeeded, and the leader has
    decided on it."""
    state = facts(server, "flaky")
    after = [
        r.tick_ms for r in runs(server, "flaky") if r.outcome == "succeeded" and (r.started_ms or 0) > state["since"]
    ]
    return bool(after) and state["tick"] >= min(after)


def test_a_queue_nobody_consumes_becomes_late_with_one_alert(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Given an actor on a queue no worker consumes, When a fired tick's run
    has not started within grace, Then the schedule is ``late`` with one
    alert, and later late ticks send none."""
    env = env_for(redis_server, record_dir, "unconsumed")
    instances(env, app=APP, extra=["--queues", "default"])
    wait_for(lambda: states(record_dir, "unconsumed"), timeout=20, what="the late alert")
    wait_for(lambda: len(facts(redis_server, "unconsumed").get("late", [])) >= 2, timeout=20, what="2 late ticks")
    assert states(record_dir, "unconsumed") == [("pending", "late")]
    assert health_in_check(env, "unconsumed") == (1, "late")
    assert {r.outcome for r in runs(redis_server, "unconsumed")} == {"pending"}


def test_a_slow_actor_becomes_running_long(redis_server: RedisServer, record_dir: str, instances: Start) -> None:
    """Given an actor that takes 2.5 s with ``max_runtime`` 1 s, When a run
    passes 1 s, Then the schedule is ``running_long`` (one alert), and ok
    again when the run ends."""
    instances(env_for(redis_server, record_dir, "slow"), app=APP, extra=["--queues", "slow"])
    wait_for(lambda: ("ok", "running_long") in states(record_dir, "slow"), timeout=20, what="running_long")
    # (A run's start is decided before its max_runtime passes: it was ok.)
    wait_for(lambda: ("running_long", "ok") in states(record_dir, "slow"), timeout=20, what="ok after the run")
    assert [r.outcome for r in runs(redis_server, "slow") if r.outcome != "running"][-1] == "succeeded"


def test_kill_9_of_the_leader_while_failing_sends_no_second_alert(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Given two instances sharing a RedisBroker and a failing schedule
    that has alerted, When the leading instance is killed with SIGKILL,
    Then the other takes over, decides further failures, and sends no
    second alert."""
    env = env_for(
        redis_server, record_dir, "flaky", MON_THRESHOLD="1", MON_BROKER=f"redis://127.0.0.1:{redis_server.port}/1"
    )
    first, second = instances(env, app=APP), instances(env, app=APP)
    wait_for(lambda: states(record_dir, "flaky"), timeout=20, what="the failing alert")
    wait_for(lambda: redis_server.client().llen(KEYS.alerts) == 0, timeout=60, what="the alert delivered")
    leader, follower = (first, second) if first.leader_pids() else (second, first)
    fails = facts(redis_server, "flaky")["fails"]
    leader.kill9()
    wait_for(follower.leader_pids, timeout=20, what="the takeover")
    wait_for(lambda: facts(redis_server, "flaky")["fails"] >= fails + 2, timeout=20, what="failures decided after")
    [(previous, state)] = states(record_dir, "flaky")
    assert state == "failing" and previous in ("pending", "ok")


class _Hook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[dict[str, Any], str]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append((json.loads(body), self.headers.get("Authorization", "")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook_port() -> Iterator[int]:
    _Hook.received = []
    yield free_port()


def test_a_webhook_down_at_first_receives_the_alert_once_it_is_up(
    redis_server: RedisServer, record_dir: str, instances: Start, hook_port: int
) -> None:
    """Given a webhook URL (with credentials) nobody listens on, When a
    schedule alerts, Then the alert waits in the outbox; When the receiver
    comes up, Then it gets the alert with basic auth, and the password is
    in no log line."""
    url = f"http://hooker:s3cret@127.0.0.1:{hook_port}/hook"
    instance = instances(env_for(redis_server, record_dir, "flaky", MON_THRESHOLD="1", MON_WEBHOOK=url), app=APP)
    wait_for(lambda: states(record_dir, "flaky"), timeout=60, what="the alert (log line and on_alert)")
    # The receiver comes up only once a delivery has failed (on a loaded
    # machine the first attempt can come after any fixed pause).
    wait_for(
        lambda: "Alert webhook http://127.0.0.1" in instance.log() and " fails (" in instance.log(),
        timeout=60,
        what="a failed delivery's WARNING",
    )
    assert redis_server.client().llen(KEYS.alerts_webhook) == 1  # not delivered to the webhook yet
    server = http.server.ThreadingHTTPServer(("127.0.0.1", hook_port), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        wait_for(lambda: _Hook.received, timeout=30, what="the webhook's POST")
    finally:
        server.shutdown()
        server.server_close()
    [(body, auth)] = _Hook.received
    assert (body["schedule"], body["state"]) == ("flaky", "failing") and body["previous"] in ("pending", "ok")
    assert body["tick"] and body["error"] == "RuntimeError: flaky failed"
    assert auth.startswith("Basic ")
    wait_for(lambda: redis_server.client().llen(KEYS.alerts_webhook) == 0, timeout=60, what="the outbox emptied")
    assert "s3cret" not in instance.log() and "Alert webhook http://127.0.0.1" in instance.log()


def test_redis_down_at_a_runs_finish_keeps_the_result_and_warns_once(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Given a run in progress, When the scheduler's Redis is down as it
    finishes, Then the job completes as usual and the lost record is one
    WARNING, however many runs follow."""
    instance = instances(env_for(redis_server, record_dir, "blocker"), app=APP)
    wait_for(lambda: Path(record_dir, "started").exists(), timeout=20, what="the run to start")
    # The worker's start record (``running``), not the claim's ``pending``
    # one: the sink thread writes it after the actor may have started, and
    # a start lost to the outage would be the episode's one WARNING.
    wait_for(
        lambda: any(r.outcome == "running" for r in runs(redis_server, "blocker")),
        timeout=20,
        what="its start recorded",
    )
    redis_server.stop()
    Path(record_dir, "go").touch()
    wait_for(lambda: Path(record_dir, "done").exists(), timeout=20, what="the job to complete")
    wait_for(lambda: "Could not record the finish" in instance.log(), timeout=20, what="the warning")
    assert instance.log().count("Could not record") == 1
    assert "Traceback" not in instance.log()


def test_a_worker_killed_mid_run_does_not_stay_running(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Given a run whose worker is killed with SIGKILL, When its
    ``max_runtime`` and its worker's heartbeat (ALIVE_MS) pass under a new
    leader, Then the run is recorded ``lost`` and the schedule is
    ``running_long``, not running for ever."""
    env = env_for(
        redis_server, record_dir, "slow", MON_SLOW_S="60", MON_BROKER=f"redis://127.0.0.1:{redis_server.port}/1"
    )
    first = instances(env, app=APP, extra=["--queues", "slow"])
    [started] = wait_for(
        lambda: [r for r in runs(redis_server, "slow") if r.outcome == "running"], timeout=20, what="a run to start"
    )
    first.kill9()
    instances(env, app=APP, extra=["--queues", "default"])  # a new leader; nobody runs slow any more
    wait_for(
        lambda: any(r.tick_ms == started.tick_ms and r.outcome == "lost" for r in runs(redis_server, "slow")),
        timeout=60,
        what="the killed run recorded lost",
    )
    assert facts(redis_server, "slow")["health"] in ("running_long", "late")


def test_a_live_run_past_max_runtime_is_running_long_and_never_lost(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Issue 30 item 7: Given a run that takes longer than max_runtime (1 s)
    and longer than a heartbeat's lapse (ALIVE_MS), When its worker is alive
    and still running it, Then the schedule is running_long and the run
    stays ``running`` (it used to be labelled ``lost``), and it finishes
    ``succeeded``."""
    env = env_for(
        redis_server,
        record_dir,
        "slow",
        MON_SLOW_S=str(ALIVE_MS // 1000 + 10),
        MON_BROKER=f"redis://127.0.0.1:{redis_server.port}/1",
    )
    instances(env, app=APP)
    [started] = wait_for(
        lambda: [r for r in runs(redis_server, "slow") if r.outcome == "running"], timeout=30, what="a run to start"
    )
    assert started.started_ms is not None
    wait_for(lambda: facts(redis_server, "slow").get("health") == "running_long", timeout=30, what="running_long")
    wait_for(
        lambda: _server_ms(redis_server) > started.started_ms + ALIVE_MS + 2000,  # type: ignore[operator]
        timeout=60,
        what="the start's own heartbeat to have lapsed",
    )
    [now] = [r for r in runs(redis_server, "slow") if r.tick_ms == started.tick_ms]
    assert now.outcome == "running"
    wait_for(
        lambda: any(r.tick_ms == started.tick_ms and r.outcome == "succeeded" for r in runs(redis_server, "slow")),
        timeout=60,
        what="the run's finish",
    )
    assert all(r.outcome != "lost" for r in runs(redis_server, "slow"))


def test_with_every_worker_stopped_check_reports_missed_after_grace(
    redis_server: RedisServer, record_dir: str, instances: Start
) -> None:
    """Given a schedule that ran, When every worker stops, Then ``check``
    (no leader needed) reports it ``missed`` once a tick is more than grace
    overdue, exit status 2."""
    env = env_for(redis_server, record_dir, "tick")
    instance = instances(env, app=APP)
    wait_for(lambda: any(r.outcome == "succeeded" for r in runs(redis_server, "tick")), timeout=20)
    assert health_in_check(env, "tick")[1] in ("ok", "pending")
    instance.kill9()  # every worker gone at once, the lease left to expire
    # The next tick after the last decided one, plus grace (1 s), on Redis's clock.
    last = int(redis_server.client().hget(KEYS.ticks, "tick").split(":")[0])
    wait_for(lambda: _server_ms(redis_server) > last + 1000 + 1000, timeout=60, what="grace to pass")
    assert health_in_check(env, "tick") == (2, "missed")


def _server_ms(server: RedisServer) -> int:
    seconds, micros = server.client().time()
    return int(seconds) * 1000 + int(micros) // 1000
