"""``dramatiq-cron check`` and ``runs``, and the monitoring options of
``add``, against a real Redis (the command as a subprocess loading
tests/apps/cronapp.py; no worker needed)."""

from __future__ import annotations

import json
import logging

import pytest

from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.runs import RedisRuns
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.redis_server import RedisServer, free_port
from tests.test_cli import APP, cli, cli_json

KEYS = Keys("dramatiq-cron")
RUN_KEYS = ["tick", "outcome", "started", "finished", "duration_ms", "attempt", "host", "pid", "error"]


def env_of(server: RedisServer) -> dict[str, str]:
    return {"DRAMATIQ_CRON_REDIS_URL": server.url}


def test_runs_lists_a_schedules_runs_newest_first_with_the_issues_keys(redis_server: RedisServer) -> None:
    client, _ = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)
    runs = RedisRuns(client, KEYS, run_history=100, events_length=100)
    for tick, outcome, error in ((1_000_000, "succeeded", ""), (2_000_000, "failed", "ValueError: <b>no</b>")):
        runs.record_run("start", "tick_0", tick, attempt=1, token=str(tick), host="web-1", pid=42)
        runs.record_run(
            "finish", "tick_0", tick, attempt=1, token=str(tick), host="web-1", pid=42, outcome=outcome, error=error
        )
    client.close()

    data = cli_json(env_of(redis_server), "runs", APP, "tick_0", "--limit", "5")
    assert list(data) == ["runs"]
    newest, oldest = data["runs"]
    assert list(newest) == RUN_KEYS
    assert (newest["tick"], newest["outcome"], newest["error"]) == (
        "1970-01-01T00:33:20.000+00:00",
        "failed",
        "ValueError: <b>no</b>",
    )
    assert (oldest["outcome"], oldest["error"], oldest["attempt"], oldest["host"], oldest["pid"]) == (
        "succeeded",
        None,
        1,
        "web-1",
        42,
    )
    assert oldest["duration_ms"] >= 0
    table = cli(env_of(redis_server), "runs", APP, "tick_0")
    assert table.returncode == 0 and "failed" in table.stdout and "web-1" in table.stdout


def test_check_exits_by_the_worst_health_nagios_style(redis_server: RedisServer) -> None:
    env = env_of(redis_server)
    empty = cli(env, "check", APP, "--json")
    assert empty.returncode == 2, empty.stderr  # no ledger, no worker: not firing
    assert json.loads(empty.stdout)["schedules"][0]["health"] == "missed"
    table = cli(env, "check", APP)
    assert table.returncode == 2 and "never registered by any process" in table.stdout
    # A worker registered the schedule (a baseline; a day ahead, so that no
    # tick falls due however slowly this test runs).
    seconds, _ = redis_server.client().time()
    redis_server.client().hset(KEYS.ticks, "tick_0", f"{(int(seconds) + 86_400) * 1000}:0:baseline")
    first = cli(env, "check", APP, "--json")
    assert first.returncode == 0, first.stderr
    [entry] = json.loads(first.stdout)["schedules"]
    assert list(entry) == ["id", "actor", "name", "health", "since", "last_run"]
    assert (entry["id"], entry["name"], entry["health"], entry["last_run"]) == ("tick_0", None, "pending", None)

    for health, status in (("late", 1), ("running_long", 1), ("failing", 2), ("ok", 0)):
        redis_server.client().hset(KEYS.health, "tick_0", json.dumps({"health": health, "since": 1_000}))
        result = cli(env, "check", APP, "--json")
        assert result.returncode == status, (health, result.stderr)
        assert json.loads(result.stdout)["schedules"][0]["health"] == health
    redis_server.client().sadd(KEYS.paused, "tick_0")
    assert cli(env, "check", APP).returncode == 0


def test_check_exits_3_in_one_line_when_redis_cannot_be_reached() -> None:
    result = cli({"DRAMATIQ_CRON_REDIS_URL": f"redis://:pw@127.0.0.1:{free_port()}/0"}, "check", APP)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "cannot reach Redis" in result.stderr and "pw" not in result.stderr


def test_add_takes_the_monitoring_thresholds_and_refuses_a_bad_one(redis_server: RedisServer) -> None:
    env = env_of(redis_server)
    added = cli_json(
        env, "add", APP, "tick_0", "0 3 * * *", "--name", "nightly",
        "--grace", "5000", "--max-runtime", "9000", "--failure-threshold", "3",
    )  # fmt: skip
    assert (added["grace"], added["max_runtime"], added["failure_threshold"]) == (5000, 9000, 3)
    bad = cli(env, "add", APP, "tick_0", "0 3 * * *", "--name", "other", "--failure-threshold", "0")
    assert bad.returncode == 2
    assert "tick_0" in bad.stderr and "failure_threshold must be a positive int of runs, got 0" in bad.stderr


def test_a_runtime_schedules_thresholds_survive_the_leaders_read(redis_server: RedisServer) -> None:
    """The leader loads runtime schedules through a template shared by
    similar ones: the thresholds must come through it per schedule."""
    env = env_of(redis_server)
    for name, grace in (("a", "1000"), ("b", "2000")):
        cli_json(env, "add", APP, "tick_0", "0 3 * * *", "--name", name, "--grace", grace)
    client, _ = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)
    store = RuntimeSchedules(client, KEYS, resolve_actor=lambda actor: ActorInfo(str(actor), "default"))
    _, loaded = store.load_all()
    client.close()
    assert {sid: s.grace for sid, s in loaded.items()} == {"tick_0:a": 1000, "tick_0:b": 2000}
    assert {s.max_runtime for s in loaded.values()} == {None}


def test_status_counts_the_schedules_by_health(redis_server: RedisServer) -> None:
    redis_server.client().hset(KEYS.health, "tick_0", json.dumps({"health": "failing", "since": 1_000}))
    result = cli(env_of(redis_server), "status", APP, "--json")
    assert result.returncode == 1  # no leader: status's own verdict
    assert json.loads(result.stdout)["health"] == {"failing": 1}
    table = cli(env_of(redis_server), "status", APP)
    assert "Health:     1 failing" in table.stdout


def _rewrite_expression(server: RedisServer, schedule_id: str, expression: str) -> None:
    """Store ``expression`` as an earlier version (or another croniter)
    accepted and wrote it, bypassing today's rules."""
    client = server.client()
    definition = json.loads(client.hget(KEYS.runtime, schedule_id))  # type: ignore[arg-type]
    client.hset(KEYS.runtime, schedule_id, json.dumps({**definition, "expression": expression}))


def stored_with_problems(server: RedisServer) -> None:
    env = env_of(server)
    for name in ("good", "quarterly", "february", "h8"):
        cli_json(env, "add", APP, "tick_0", "0 3 * * *", "--name", name)
    # Written under croniter 6 (every 15 minutes there) and under croniter
    # 7 (the Sundays of February), before the rules of one meaning.
    _rewrite_expression(server, "tick_0:quarterly", "59/15 * * * *")
    _rewrite_expression(server, "tick_0:february", "0 0 31 2 0")
    # H picks the 20th for tick_0:h8 (a day February has), the 31st for
    # tick_0:h12.
    _rewrite_expression(server, "tick_0:h8", "0 0 H 2 *")
    cli_json(env, "add", APP, "tick_0", "0 3 * * *", "--name", "h12")
    _rewrite_expression(server, "tick_0:h12", "0 0 H 2 *")


def test_check_reports_stored_definitions_that_no_longer_parse_or_read_differently(redis_server: RedisServer) -> None:
    stored_with_problems(redis_server)
    result = cli(env_of(redis_server), "check", APP, "--json")
    assert result.returncode == 2, result.stderr  # one cannot be read: it does not fire
    stored = {p["id"]: p for p in json.loads(result.stdout)["stored"]}
    assert sorted(stored) == ["tick_0:february", "tick_0:h12", "tick_0:quarterly"]
    assert stored["tick_0:february"]["problem"] == "unreadable"
    assert stored["tick_0:h12"]["problem"] == "unreadable" and "never fires" in stored["tick_0:h12"]["detail"]
    assert "never falls in month '2'" in stored["tick_0:february"]["detail"]
    assert stored["tick_0:quarterly"]["problem"] == "changed"
    assert stored["tick_0:quarterly"]["detail"] == "stored as '59/15 * * * *', now read as '59 * * * *'"
    table = cli(env_of(redis_server), "check", APP)
    assert "Stored runtime definitions:" in table.stdout and "tick_0:quarterly" in table.stdout

    # Re-adding it under today's rules clears the report of it.
    cli_json(env_of(redis_server), "add", APP, "tick_0", "59 * * * *", "--name", "quarterly")
    cli(env_of(redis_server), "remove", APP, "tick_0:february")
    cli(env_of(redis_server), "remove", APP, "tick_0:h12")
    assert json.loads(cli(env_of(redis_server), "check", APP, "--json").stdout)["stored"] == []


def test_the_leader_logs_one_warning_for_every_stored_definition_read_differently(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    stored_with_problems(redis_server)
    client, _ = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)
    store = RuntimeSchedules(client, KEYS, resolve_actor=lambda actor: ActorInfo(str(actor), "default"))
    with caplog.at_level(logging.WARNING):
        _, loaded = store.load_all()
    client.close()
    # The broken one never stops the others; the changed one fires as now read.
    assert sorted(loaded) == ["tick_0:good", "tick_0:h8", "tick_0:quarterly"]
    assert loaded["tick_0:quarterly"].expression == "59 * * * *"
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "2 cannot be read and are skipped ('tick_0:february'" in warning and "'tick_0:h12'" in warning, warning
    assert "'tick_0:quarterly': stored as '59/15 * * * *', now read as '59 * * * *'" in warning, warning
    assert "dramatiq-cron check" in warning
