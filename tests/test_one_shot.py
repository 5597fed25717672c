"""One-shot runtime schedules (``add --at``) under real ``dramatiq``
workers and a real Redis: each fires once, across a SIGKILL of the
leader, shows as done, and is removed by the leader after its retention.

Every instant is taken from Redis's clock (the clock the CLI checks an
``--at`` against), far enough ahead that the ``dramatiq-cron add`` process
still finds it in the future on a loaded machine; which process may fire
what is decided by freezing the instances, not by racing their timers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from dramatiq_cron_middleware.schedules.planner import ON_TIME_MS
from tests.support.instances import History, Instance, wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, app_env, cli, cli_json

LEASE = "{dramatiq-cron}:lease"

#: How far ahead of Redis's time a one-shot is set: several times what one
#: ``dramatiq-cron add`` process takes to start and write on a loaded machine.
AHEAD_MS = 8_000

#: The one-shots' retention: long past the few polls between a fire and
#: freezing the instances, so a fired one-shot is still listed when looked at.
RETENTION_MS = 5_000


def at_text(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone(dt.timedelta(hours=1))).isoformat()


def listed(env: dict[str, str]) -> dict[str, Any]:
    return {s["schedule"]: s for s in cli_json(env, "list", APP)["schedules"]}


def add_one_shot(env: dict[str, str], server: RedisServer, name: str) -> int:
    """``dramatiq-cron add tick_0 --at <Redis's now + AHEAD_MS> --name name``;
    returns the instant."""
    at = server.time_ms() + AHEAD_MS
    added = cli_json(env, "add", APP, "tick_0", "--at", at_text(at), "--name", name)
    assert added["at"] is not None and added["next"] == added["at"]
    return at


def test_a_one_shot_fires_once_across_a_kill_of_the_leader_shows_as_done_and_is_removed(
    redis_server: RedisServer, record_dir: str, history: History, instances: Callable[..., Instance]
) -> None:
    """Given two instances and a one-shot ``early`` fired by the leader,
    When both instances are frozen (SIGSTOP), a second one-shot ``late``
    falls due while they are, and the process that fired ``early`` is
    killed with SIGKILL, Then the other instance, thawed, takes over and
    catches ``late`` up, ``early`` shows as done, neither is enqueued
    twice, And the new leader removes both after the retention, with no
    further enqueue."""
    env = {
        **app_env(redis_server, record_dir),
        "CRON_APP_TTL": "1000",
        "CRON_APP_ONE_SHOT_RETENTION": str(RETENTION_MS),
        "CRON_APP_CRON": "0 0 1 1 *",
    }
    group = [instances(env), instances(env)]
    client = redis_server.client()
    wait_for(lambda: client.hget(LEASE, "pid"), timeout=30, what="a leader")

    def enqueued(name: str) -> list[Any]:
        return [e for e in history.enqueues() if e.schedule == f"tick_0:{name}"]

    add_one_shot(env, redis_server, "early")
    [fired] = wait_for(lambda: enqueued("early"), timeout=AHEAD_MS / 1000 + 30, what="the early one-shot to fire")
    for instance in group:
        instance.freeze()
    leader, other = group if fired.pid in group[0].worker_pids() else group[::-1]
    assert fired.pid in leader.worker_pids()
    shown = listed(env)
    assert shown["tick_0:early"]["done"] is True and shown["tick_0:early"]["next"] == []

    late_at = add_one_shot(env, redis_server, "late")
    assert listed(env)["tick_0:late"]["done"] is False
    # Past the on-time window too: whoever decides it now decides a catch-up.
    wait_for(
        lambda: redis_server.time_ms() > late_at + ON_TIME_MS,
        timeout=AHEAD_MS / 1000 + 30,
        what="the late one-shot's instant and its on-time window to pass",
    )
    leader.kill9()
    other.thaw()

    [caught_up] = wait_for(lambda: enqueued("late"), timeout=30, what="the late one-shot, caught up by the new leader")
    assert caught_up.pid in other.worker_pids()
    outcomes = {e["schedule"]: e["outcome"] for e in cli_json(env, "history", APP, "-n", "50")["entries"]}
    assert outcomes.get("tick_0:late") == "caught_up", outcomes

    wait_for(lambda: not {"tick_0:early", "tick_0:late"} & set(listed(env)), timeout=30, what="both removed")
    assert len(enqueued("early")) == 1 and len(enqueued("late")) == 1
    assert client.hget("{dramatiq-cron}:runtime", "tick_0:late") is None


def test_an_at_in_the_past_or_malformed_is_refused_naming_the_value(redis_server: RedisServer, record_dir: str) -> None:
    env = app_env(redis_server, record_dir)
    past = at_text(redis_server.time_ms() - 60_000)
    ahead = at_text(redis_server.time_ms() + 60_000)
    cases = {
        ("--at", past): "is not after Redis's time",
        ("--at", "tomorrow"): "--at: cannot read 'tomorrow' as an instant",
        ("* * * * *", "--at", ahead): "give one of a cron EXPRESSION, --every MS or --at WHEN",
    }
    for args, expected in cases.items():
        result = cli(env, "add", APP, "tick_0", *args, "--name", "once")
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    assert redis_server.client().hlen("{dramatiq-cron}:runtime") == 0
