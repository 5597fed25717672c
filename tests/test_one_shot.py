"""One-shot runtime schedules (``add --at``) under real ``dramatiq``
workers and a real Redis: each fires once, across a SIGKILL of the
leader, shows as done, and is removed by the leader after its retention.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, app_env, cli, cli_json

LEASE = "{dramatiq-cron}:lease"


def at_text(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone(dt.timedelta(hours=1))).isoformat()


def listed(env: dict[str, str]) -> dict[str, Any]:
    return {s["schedule"]: s for s in cli_json(env, "list", APP)["schedules"]}


def test_a_one_shot_fires_once_across_a_kill_of_the_leader_shows_as_done_and_is_removed(
    redis_server: RedisServer, record_dir: str, history: History, instances: Callable[..., Instance]
) -> None:
    """Given two instances and two one-shots, ``early`` two seconds ahead
    and ``late`` one second after it, When the leader is killed with
    SIGKILL right after ``early`` fired (``late`` falls in the takeover
    gap), Then the other instance takes over, ``late`` is caught up, each
    is enqueued exactly once, both show as done, And the leader removes
    both after the retention, with no further enqueue."""
    env = {
        **app_env(redis_server, record_dir),
        "CRON_APP_TTL": "1000",
        "CRON_APP_ONE_SHOT_RETENTION": "4000",
        "CRON_APP_CRON": "0 0 1 1 *",
    }
    a, b = instances(env), instances(env)
    client = redis_server.client()
    wait_for(lambda: client.hget(LEASE, "pid"), timeout=20, what="a leader")
    start = now_ms()
    for name, offset in (("early", 2000), ("late", 3000)):
        added = cli_json(env, "add", APP, "tick_0", "--at", at_text(start + offset), "--name", name)
        assert added["at"] is not None and added["next"] == added["at"]

    def enqueued(name: str) -> list[Any]:
        return [e for e in history.enqueues() if e.schedule == f"tick_0:{name}"]

    wait_for(lambda: enqueued("early"), timeout=15, what="the early one-shot to fire")
    leader_pid = int(client.hget(LEASE, "pid") or 0)
    leader, other = (a, b) if leader_pid in a.worker_pids() else (b, a)
    assert leader_pid in leader.worker_pids()
    leader.kill9()

    wait_for(lambda: enqueued("late"), timeout=20, what="the late one-shot, caught up by the new leader")
    assert [pid for pid, _ in other.leader_pids()], "the other instance never led"
    shown = listed(env)
    assert shown["tick_0:early"]["done"] is True and shown["tick_0:late"]["done"] is True
    assert shown["tick_0:late"]["next"] == []

    wait_for(lambda: not {"tick_0:early", "tick_0:late"} & set(listed(env)), timeout=20, what="both removed")
    assert len(enqueued("early")) == 1 and len(enqueued("late")) == 1
    assert client.hget("{dramatiq-cron}:runtime", "tick_0:late") is None


def test_an_at_in_the_past_or_malformed_is_refused_naming_the_value(redis_server: RedisServer, record_dir: str) -> None:
    env = app_env(redis_server, record_dir)
    past = at_text(now_ms() - 60_000)
    cases = {
        ("--at", past): "is not after Redis's time",
        ("--at", "tomorrow"): "--at must be epoch milliseconds or an ISO 8601 time with offset, got 'tomorrow'",
        ("* * * * *", "--at", at_text(now_ms() + 60_000)): "give one of a cron EXPRESSION, --every MS or --at WHEN",
    }
    for args, expected in cases.items():
        result = cli(env, "add", APP, "tick_0", *args, "--name", "once")
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    assert redis_server.client().hlen("{dramatiq-cron}:runtime") == 0
