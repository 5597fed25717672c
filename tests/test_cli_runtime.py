"""``dramatiq-cron add`` / ``remove``, and runtime schedules in ``list``,
``status`` and ``history``, against a real Redis.

The command runs as a subprocess loading tests/apps/cronapp.py, as an
operator would; no worker needs to run for any of it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json

import redis

from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.operator import RedisOperator
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.redis_server import RedisServer, free_port
from tests.test_cli import APP, cli, cli_json

KEYS = Keys("dramatiq-cron")


def env_of(server: RedisServer) -> dict[str, str]:
    return {"DRAMATIQ_CRON_REDIS_URL": server.url}


def test_add_list_remove_round_trip_shows_the_runtime_schedule_beside_the_declared_one(
    redis_server: RedisServer,
) -> None:
    """Given the test app (one declared schedule), When an operator adds a
    runtime schedule, Then list shows both with their sources and the
    runtime one's next fire times, And after remove it is gone for good."""
    env = env_of(redis_server)
    added = cli_json(
        env, "add", APP, "tick_0", "30 9 * * mon-fri", "--name", "tenant-42",
        "--timezone", "Europe/Berlin", "--kwargs", '{"tenant": 42}',
    )  # fmt: skip
    assert added["schedule"] == "tick_0:tenant-42" and added["source"] == "runtime"
    assert added["revision"] == 1 and added["timezone"] == "Europe/Berlin" and added["kwargs"] == {"tenant": 42}
    assert dt.datetime.fromisoformat(added["next"]).strftime("%H:%M") == "09:30"

    listed = cli_json(env, "list", APP, "--next", "2")
    by_id = {s["schedule"]: s for s in listed["schedules"]}
    assert by_id["tick_0"]["source"] == "code"
    runtime = by_id["tick_0:tenant-42"]
    assert (runtime["source"], runtime["declared"], runtime["revision"]) == ("runtime", True, 1)
    assert runtime["next"][0] == added["next"] and len(runtime["next"]) == 2
    assert listed["runtime_total"] == 1

    table = cli(env, "list", APP)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert "SOURCE" in header.split() and "NAME" in header.split()
    [row] = [r for r in rows if "tenant-42" in r]
    assert " runtime " in row and "30 9 * * mon-fri" in row and "Europe/Berlin" in row

    replaced = cli_json(env, "add", APP, "tick_0", "0 10 * * *", "--name", "tenant-42")
    assert replaced["revision"] == 2 and replaced["expression"] == "0 10 * * *"

    removed = cli(env, "remove", APP, "tick_0", "tenant-42")
    assert removed.returncode == 0, removed.stderr
    assert "Removed runtime schedule tick_0:tenant-42" in removed.stdout
    assert "tick_0:tenant-42" not in {s["schedule"] for s in cli_json(env, "list", APP)["schedules"]}
    assert redis_server.client().hget(KEYS.runtime_revs, "tick_0:tenant-42") is None
    again = cli_json(env, "remove", APP, "tick_0", "tenant-42")
    assert again == {"schedule": "tick_0:tenant-42", "removed": False}


def test_an_interval_schedule_is_added_with_every_and_listed_with_its_ticks(redis_server: RedisServer) -> None:
    env = env_of(redis_server)
    added = cli_json(env, "add", APP, "plain_job", "--every", "90000", "--offset", "1000", "--name", "sync",
                     "--args", "[7]", "--end", "2999-01-01T00:00:00Z")  # fmt: skip
    assert (added["every"], added["offset"], added["args"]) == (90_000, 1000, [7])
    assert added["end"].startswith("2999-01-01")
    listed = cli_json(env, "list", APP, "--next", "3")
    [entry] = [s for s in listed["schedules"] if s["schedule"] == "plain_job:sync"]
    ticks = [dt.datetime.fromisoformat(t) for t in entry["next"]]
    assert all((b - a).total_seconds() == 90 for a, b in itertools.pairwise(ticks))
    assert all(round(t.timestamp() * 1000) % 90_000 == 1000 for t in ticks)


def test_a_runtime_schedule_whose_actor_the_app_no_longer_declares_shows_as_such(redis_server: RedisServer) -> None:
    """Given a runtime schedule written by a deploy that declared ``gone``,
    When the current app (which does not) lists and reports status, Then
    the schedule is shown, marked as of an undeclared actor."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    store = RuntimeSchedules(client, KEYS, resolve_actor=lambda actor: ActorInfo("gone", "default"))
    store.add("gone", "0 3 * * *", name="nightly")
    env = env_of(redis_server)

    listed = cli_json(env, "list", APP)
    [entry] = [s for s in listed["schedules"] if s["schedule"] == "gone:nightly"]
    assert (entry["source"], entry["declared"]) == ("runtime", False)
    table = cli(env, "list", APP)
    assert "runtime (actor not declared)" in table.stdout

    status = cli(env, "status", APP, "--json")
    assert status.returncode == 1  # no worker runs: no leader
    assert json.loads(status.stdout)["runtime"] == {"total": 1, "by_actor": {"gone": 1}, "undeclared": {"gone": 1}}
    text = cli(env, "status", APP).stdout
    assert "Runtime:    1 runtime schedule(s) for 1 actor(s); actors this app does not declare: gone (1)" in text


def test_history_shows_each_entrys_source_and_filters_runtime_schedules_by_actor_and_id(
    redis_server: RedisServer,
) -> None:
    env = env_of(redis_server)
    cli_json(env, "add", APP, "tick_0", "0 * * * *", "--name", "hourly")
    control = RedisOperator(client=redis.Redis.from_url(redis_server.url, decode_responses=True), keys=KEYS)
    control.record("triggered", who="api", entries=[("tick_0:hourly", "manual")], tick_ms=1_000, message_id="m-runtime")
    control.record("triggered", who="api", entries=[("tick_0", "manual")], tick_ms=2_000, message_id="m-code")

    by_actor = cli_json(env, "history", APP, "tick_0")["entries"]
    assert [(e["outcome"], e["schedule"], e["source"], e["actor"], e["who"]) for e in by_actor] == [
        ("add", "tick_0:hourly", "runtime", "tick_0", "cli"),  # the audit trail
        ("triggered", "tick_0:hourly", "runtime", "tick_0", "api"),
        ("triggered", "tick_0", "code", "tick_0", "api"),
    ]
    by_id = cli_json(env, "history", APP, "tick_0:hourly")["entries"]
    assert [e["message_id"] for e in by_id] == [None, "m-runtime"]
    table = cli(env, "history", APP).stdout.splitlines()
    assert table[0].split()[:4] == ["WHEN", "OUTCOME", "SOURCE", "SCHEDULE"]
    assert " runtime " in table[2] and " code " in table[3]


def test_pause_accepts_a_runtime_schedule_id(redis_server: RedisServer) -> None:
    env = env_of(redis_server)
    cli_json(env, "add", APP, "tick_0", "0 * * * *", "--name", "hourly")
    paused = cli_json(env, "pause", APP, "tick_0:hourly")
    assert paused["changed"] is True and "tick_0:hourly" in paused["paused"]
    listed = cli_json(env, "list", APP)
    assert {s["schedule"]: s["paused"] for s in listed["schedules"]}["tick_0:hourly"] is True


BAD = [
    (["tick_0", "61 * * * *", "--name", "x"], "'61 * * * *'"),
    (["tick_0", "0 * * * *", "--name", "x", "--timezone", "Mars/Base"], "Mars/Base"),
    (["tick_0", "0 * * * *", "--name", "x", "--kwargs", "{tenant: 1}"], "{tenant: 1}"),
    (["tick_0", "0 * * * *", "--name", "x", "--args", '{"a": 1}'], "JSON array"),
    (["tick_0", "0 * * * *", "--name", "n" * 65], "n" * 65),
    (["nobody", "0 * * * *", "--name", "x"], "'nobody'"),
    (["tick_0", "0 * * * *", "--name", "x", "--every", "60000"], "not both"),
    (["tick_0", "--name", "x"], "--every"),
    (["tick_0", "--every", "999", "--name", "x"], "999"),
    (["tick_0", "0 * * * *", "--name", "x", "--start", "yesterday"], "'yesterday'"),
    (["tick_0", "0 * * * *", "--name", "x", "--start", "2026-01-01T00:00:00"], "timezone-aware"),
]


def test_bad_input_is_one_line_with_a_non_zero_exit_and_writes_nothing(redis_server: RedisServer) -> None:
    env = env_of(redis_server)
    for args, value in BAD:
        result = cli(env, "add", APP, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith("dramatiq-cron: error: ") and value in line, (args, line)
    assert redis_server.client().keys("{dramatiq-cron}:runtime*") == []
    bad_name = cli(env, "remove", APP, "tick_0", "a b")
    assert bad_name.returncode == 2 and "'a b'" in bad_name.stderr


def test_an_unreachable_redis_is_one_line_and_exit_three() -> None:
    env = {"DRAMATIQ_CRON_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    for args in (["add", APP, "tick_0", "0 * * * *", "--name", "x"], ["remove", APP, "tick_0", "x"]):
        result = cli(env, *args)
        assert result.returncode == 3, result.stderr
        [line] = result.stderr.splitlines()
        assert "cannot reach Redis" in line


def test_a_foreign_value_under_a_runtime_key_is_one_line_not_a_traceback(redis_server: RedisServer) -> None:
    redis_server.client().set(KEYS.runtime_ids, "not a sorted set")
    result = cli(env_of(redis_server), "add", APP, "tick_0", "0 * * * *", "--name", "x")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "WRONGTYPE" in line and "{dramatiq-cron}:runtime:ids" in line
    assert redis_server.client().get(KEYS.runtime_version) is None
    listed = cli(env_of(redis_server), "list", APP)
    assert listed.returncode == 2 and len(listed.stderr.splitlines()) == 1 and "WRONGTYPE" in listed.stderr
