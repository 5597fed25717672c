"""``dramatiq-cron pause --for/--until`` under a real ``dramatiq`` worker
and a real Redis: the pause ends by itself, decided by the leader's fenced
claim, while the process that paused is long gone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from tests.support.instances import History, Instance, wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, app_env, cli, cli_json

PAUSED = "{dramatiq-cron}:paused"


def test_a_pause_for_three_seconds_resumes_by_itself_while_the_pausing_process_is_gone(
    redis_server: RedisServer, record_dir: str, history: History, instances: Callable[..., Instance]
) -> None:
    """Given a worker firing a per-second schedule, When an operator runs
    ``pause --for 3s`` (a process that exits at once), Then ``list`` shows
    the time left, no tick between the pause and its end is enqueued (they
    are recorded paused), And the first tick at or after the end fires, and
    the leader's claim removes the pause from the paused set."""
    env = app_env(redis_server, record_dir)
    instances(env)
    wait_for(lambda: len(history.ticks("tick_0")) >= 2, timeout=20, what="two fired ticks")

    paused = cli_json(env, "pause", APP, "tick_0", "--for", "3s")
    assert paused["changed"] is True and paused["until"] is not None
    until = int(dt.datetime.fromisoformat(paused["until"]).timestamp() * 1000)
    fired_before = max(history.ticks("tick_0"))
    [row] = [r for r in cli(env, "list", APP).stdout.splitlines() if r.startswith("tick_0 ")]
    assert "until " in row and " left)" in row

    first_after = -(-until // 1000) * 1000
    wait_for(lambda: first_after in history.ticks("tick_0"), timeout=15, what="the first tick after the pause")
    held = [t for t in history.ticks("tick_0") if fired_before + 1000 < t < until]
    assert held == []
    outcomes = {e["tick_ms"]: e["outcome"] for e in cli_json(env, "history", APP, "-n", "50")["entries"]}
    assert [outcomes.get(t) for t in range(fired_before + 2000, until, 1000)] == ["paused"] * len(
        range(fired_before + 2000, until, 1000)
    )
    assert redis_server.client().smembers(PAUSED) == set()
    assert cli_json(env, "list", APP)["schedules"][0]["paused"] is False


def test_a_pause_end_that_cannot_be_read_or_is_past_is_refused_naming_it(
    redis_server: RedisServer, record_dir: str
) -> None:
    env = app_env(redis_server, record_dir)
    cases = {
        ("--for", "2 hours"): "cannot read '2 hours' as a duration",
        ("--until", "2001-01-01T00:00Z"): "a pause's end must be in the future, got 2001-01-01T00:00:00.000+00:00",
    }
    for args, expected in cases.items():
        result = cli(env, "pause", APP, "tick_0", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    assert redis_server.client().exists(PAUSED) == 0
