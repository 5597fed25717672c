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


def test_a_pause_for_a_few_seconds_resumes_by_itself_while_the_pausing_process_is_gone(
    redis_server: RedisServer, record_dir: str, history: History, instances: Callable[..., Instance]
) -> None:
    """Given a worker firing a per-second schedule, When an operator runs
    ``pause --for 5s`` (a process that exits at once), Then no tick between
    the pause and its end is enqueued (they are recorded paused), And the
    first tick at or after the end fires, and the leader's claim removes the
    pause from the paused set.

    The pause is judged on Redis's clock: its history entry is recorded
    after the pause is written, so every tick after that entry and before
    the end was claimed while paused, however slowly the CLI ran."""
    env = app_env(redis_server, record_dir)
    instances(env)
    wait_for(lambda: len(history.ticks("tick_0")) >= 2, timeout=30, what="two fired ticks")

    paused = cli_json(env, "pause", APP, "tick_0", "--for", "5s")
    assert paused["changed"] is True and paused["until"] is not None
    until = int(dt.datetime.fromisoformat(paused["until"]).timestamp() * 1000)
    [entry] = [e for e in cli_json(env, "history", APP, "-n", "50")["entries"] if e["outcome"] == "pause"]
    paused_at = int(dt.datetime.fromisoformat(entry["at"]).timestamp() * 1000)
    held_ticks = range(paused_at // 1000 * 1000 + 1000, until, 1000)
    assert held_ticks, f"the pause was written {paused_at} after its own end {until}"

    first_after = -(-until // 1000) * 1000
    wait_for(lambda: first_after in history.ticks("tick_0"), timeout=30, what="the first tick after the pause")
    assert [t for t in history.ticks("tick_0") if t in held_ticks] == []
    outcomes = {e["tick_ms"]: e["outcome"] for e in cli_json(env, "history", APP, "-n", "50")["entries"]}
    assert [outcomes.get(t) for t in held_ticks] == ["paused"] * len(held_ticks)
    assert redis_server.client().smembers(PAUSED) == set()
    assert cli_json(env, "list", APP)["schedules"][0]["paused"] is False


def test_list_shows_when_a_pause_ends_and_the_time_left(redis_server: RedisServer, record_dir: str) -> None:
    """Given ``pause --for 1h`` (an end no slow step reaches), Then ``list``
    shows the end and the time left, and ``list --json`` the end."""
    env = app_env(redis_server, record_dir)
    paused = cli_json(env, "pause", APP, "tick_0", "--for", "1h")
    [row] = [r for r in cli(env, "list", APP).stdout.splitlines() if r.startswith("tick_0 ")]
    until = dt.datetime.fromisoformat(paused["until"]).astimezone(dt.timezone.utc)
    assert f"until {until:%Y-%m-%d %H:%M:%S}Z (" in row and " left)" in row, row
    [listed] = cli_json(env, "list", APP)["schedules"]
    assert listed["paused"] is True and listed["paused_until"] == paused["until"]


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
