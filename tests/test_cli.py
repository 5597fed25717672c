"""The ``dramatiq-cron`` command against a real Redis and a running leader.

The command runs as a subprocess (``python -m dramatiq_cron_middleware``)
with the same environment as the ``dramatiq`` instance of the test app, so
it loads the app exactly as an operator would.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.command import dramatiq_cron
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer, free_port

APP = "tests.apps.cronapp"
SCHEDULE = "tick_0"
TICKS = "{dramatiq-cron}:ticks"
LEASE = "{dramatiq-cron}:lease"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m dramatiq_cron_middleware *args`` as an operator would."""
    return dramatiq_cron(env, *args)


def cli_json(env: dict[str, str], *args: str) -> Any:
    result = cli(env, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def history_entries(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = cli_json(env, "history", APP, *args)["entries"]
    return entries


def app_env(server: RedisServer, record_dir: str) -> dict[str, str]:
    """The app's environment, with a RedisBroker so manual triggers reach
    the workers (db 1, apart from the scheduler's keys in db 0)."""
    return {
        "DRAMATIQ_CRON_REDIS_URL": server.url,
        "CRON_APP_BROKER": f"redis://127.0.0.1:{server.port}/1",
        "CRON_APP_RECORD": record_dir,
        "CRON_APP_TTL": "2000",
    }


def fired_ticks(server: RedisServer) -> int:
    return 1 if fired_tick_ms(server) else 0


def fired_tick_ms(server: RedisServer) -> int:
    """The tick of the ledger's last decision (0 before the first fire)."""
    value = server.client().hget(TICKS, SCHEDULE)
    return int(value.split(":")[0]) if value and value.endswith(":1") else 0


@dataclass
class Running:
    """A Redis and a running two-process instance of the test app."""

    server: RedisServer
    instance: Instance
    env: dict[str, str]
    history: History
    #: A tick the leader had fired when the tests began: ticks before the
    #: leader's first were never owed, so no window reaches before it.
    fired_ms: int


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    """Shared by the tests that only read, or trigger: one leader, one follower."""
    record_dir = tempfile.mkdtemp(prefix="cron-cli-record-")
    with RedisServer() as server:
        env = app_env(server, record_dir)
        instance = Instance(env, processes=2, name="cli")
        try:
            instance.start()
            fired_ms = wait_for(lambda: fired_tick_ms(server), timeout=20, what="a first fired tick")
            yield Running(server=server, instance=instance, env=env, history=History(record_dir), fired_ms=fired_ms)
        finally:
            instance.close()
            os.unlink(instance.log_path)


# -- list -----------------------------------------------------------------


def test_list_shows_each_schedule_with_its_next_fire_times_last_outcome_and_pause_state(running: Running) -> None:
    """Given a leader firing every second, When an operator lists the
    schedules, Then each shows its actor, expression, zone, the next N fire
    times, the last fired tick with its outcome, and that it is not paused."""
    data = cli_json(running.env, "list", APP, "--next", "4")
    [entry] = data["schedules"]
    assert (entry["actor"], entry["expression"], entry["timezone"]) == ("tick_0", "* * * * * *", "UTC")
    upcoming = [dt.datetime.fromisoformat(t) for t in entry["next"]]
    assert len(upcoming) == 4
    assert all(b - a == dt.timedelta(seconds=1) for a, b in itertools.pairwise(upcoming))
    assert upcoming[0] > dt.datetime.fromisoformat(data["now"])
    assert entry["last_outcome"] in ("fired", "caught_up")
    assert dt.datetime.fromisoformat(entry["last_tick"]) <= dt.datetime.fromisoformat(data["now"])
    assert entry["paused"] is False
    assert entry["health"] in ("pending", "ok")  # ok once a run finished

    table = cli(running.env, "list", APP)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == [
        "ACTOR",
        "NAME",
        "SOURCE",
        "EXPRESSION",
        "ZONE",
        "NEXT",
        "LAST",
        "TICK",
        "OUTCOME",
        "HEALTH",
        "PAUSED",
    ]
    assert row.split()[:3] == ["tick_0", "-", "code"]  # an unnamed schedule has no NAME
    assert row.startswith("tick_0") and " code " in row and "* * * * * *" in row and " UTC " in row
    assert row.rstrip().endswith("no")


# -- status ---------------------------------------------------------------


def test_status_names_the_live_leader_and_its_candidates_and_exits_zero(running: Running) -> None:
    """Given two worker processes, one leading, When an operator asks for
    the status, Then it names the leader's pid and epoch as logged, lists
    both candidates, and exits 0."""
    result = cli(running.env, "status", APP, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    leader = data["leader"]
    assert data["healthy"] is True and data["redis"]["reachable"] is True
    assert (leader["pid"], leader["epoch"]) == running.instance.leader_pids()[-1]
    assert 0 < leader["remaining_ms"] <= leader["lease_ms"] == 2000
    assert sorted(c["pid"] for c in data["candidates"]) == sorted(running.instance.worker_pids())
    assert [c["pid"] for c in data["candidates"] if c["leader"]] == [leader["pid"]]

    table = cli(running.env, "status", APP)
    assert table.returncode == 0, table.stderr
    assert f"pid {leader['pid']}, epoch {leader['epoch']}" in table.stdout
    assert "Candidates: 2 seen" in table.stdout


# -- history --------------------------------------------------------------


def test_history_lists_recent_tick_outcomes_with_delay_and_epoch(running: Running) -> None:
    """Given ticks fired by the leader, When an operator reads the history
    of the actor, Then the newest outcomes come oldest first, each with its
    tick in the schedule's zone, its delay and the epoch that decided it."""
    wait_for(lambda: len(history_entries(running.env, "tick_0", "-n", "3")) == 3, timeout=60, what="3 entries")
    entries = history_entries(running.env, "tick_0", "-n", "3")
    assert [e["schedule"] for e in entries] == [SCHEDULE] * 3
    fired = [e for e in entries if e["outcome"] in ("fired", "caught_up")]
    assert fired, entries
    for e in fired:
        assert e["delay_ms"] is not None and e["delay_ms"] >= 0
        assert e["delay"].startswith("+")
        assert e["epoch"] == running.instance.leader_pids()[-1][1]
        assert dt.datetime.fromisoformat(e["tick"]).utcoffset() == dt.timedelta(0)
    ats = [dt.datetime.fromisoformat(e["at"]) for e in entries]
    assert ats == sorted(ats)

    table = cli(running.env, "history", APP, "-n", "2")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["WHEN", "OUTCOME", "SOURCE", "SCHEDULE", "TICK", "DELAY", "EPOCH", "BY", "DETAIL"]
    assert len(lines) == 3 and all(SCHEDULE in line for line in lines[1:])


# -- trigger --------------------------------------------------------------


def test_trigger_enqueues_exactly_one_manual_message_and_leaves_the_schedule_alone(running: Running) -> None:
    """Given a leader firing every second, When an operator triggers the
    actor, Then exactly one message marked manual is enqueued and run, the
    history records it as triggered, and the ledger keeps holding scheduled
    ticks only: every scheduled tick around the trigger fires exactly once."""
    start = now_ms()
    data = cli_json(running.env, "trigger", APP, "tick_0")
    message_id = data["message_id"]

    manual = wait_for(
        lambda: [e for e in running.history.enqueues(include_manual=True) if e.manual],
        timeout=60,
        what="the manual enqueue",
    )
    assert [e.message_id for e in manual] == [message_id]
    wait_for(
        lambda: any(r["tick"] == data["tick"] for r in _runs(running)),
        timeout=60,
        what="a worker to run the manual message",
    )
    triggered = [e for e in history_entries(running.env, "-n", "50") if e["outcome"] == "triggered"]
    assert [e["message_id"] for e in triggered] == [message_id]

    # The ledger only ever holds scheduled (whole-second) ticks decided by
    # the leader, never the manual one.
    tick_ms, epoch, result = running.server.client().hget(TICKS, SCHEDULE).split(":")
    assert int(tick_ms) % 1000 == 0 and int(epoch) == running.instance.leader_pids()[-1][1] and result == "1"
    end = now_ms() + 2000
    wait_for(lambda: running.history.ticks(SCHEDULE)[-1] >= end, timeout=60, what="ticks after the trigger")
    # From two seconds before the trigger, but never before the leader's
    # first fire: the ticks before it were never owed.
    since = max(start - 2000, running.fired_ms - 1)
    verdict = running.history.judge(schedules=[SCHEDULE], start_ms=since, end_ms=end)
    assert not verdict.duplicates and not verdict.losses, verdict.summary()


def _runs(running: Running) -> list[dict[str, Any]]:
    out = []
    for name in os.listdir(running.history.record_dir):
        if name.startswith("runs-"):
            with open(os.path.join(running.history.record_dir, name)) as f:
                out += [json.loads(line) for line in f if line.strip()]
    return out


# -- errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env_override", "status", "says"),
    [
        (["list", "tests.apps.no_such_app"], {}, 2, "cannot load 'tests.apps.no_such_app'"),
        (["list", "tests.apps.cronapp:plain_job"], {}, 2, "is not a dramatiq Broker"),
        (["pause", APP, "no_such_actor"], {}, 2, "unknown cron actor or schedule 'no_such_actor'"),
        (["trigger", APP, "plain_job"], {}, 2, "unknown cron actor or schedule 'plain_job'"),
        (["history", APP, "no_such_actor"], {}, 2, "unknown cron actor"),
        (["status", APP], {"DRAMATIQ_CRON_REDIS_URL": "unreachable"}, 3, "cannot reach Redis at redis://127.0.0.1:"),
    ],
    ids=["bad-module", "not-a-broker", "unknown-actor-pause", "not-a-cron-actor", "unknown-actor-history", "no-redis"],
)
def test_errors_are_one_line_without_traceback_and_exit_non_zero(
    running: Running, args: list[str], env_override: dict[str, str], status: int, says: str
) -> None:
    """A bad module, an unknown actor or an unreachable Redis is reported as
    one line on stderr, never a traceback, and never with credentials."""
    env = dict(running.env)
    if env_override.get("DRAMATIQ_CRON_REDIS_URL") == "unreachable":
        env["DRAMATIQ_CRON_REDIS_URL"] = f"redis://operator:s3cret@127.0.0.1:{free_port()}/0"
    result = cli(env, *args)
    assert result.returncode == status, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("dramatiq-cron: error: ")
    assert says in result.stderr
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr


# -- pause / resume across a leader change -----------------------------------


def test_pause_is_honoured_by_whichever_process_leads_and_resume_restores_firing(
    redis_server: RedisServer, record_dir: str, history: History, instances: Any
) -> None:
    """Given a paused actor, When its leader stops and another process takes
    over, Then both leaders record its ticks as paused and enqueue none of
    them; When it is resumed, Then the new leader fires it again."""
    env = app_env(redis_server, record_dir)
    first = instances(env)
    wait_for(lambda: fired_ticks(redis_server), timeout=20, what="a first fired tick")
    second = instances(env)

    assert cli(env, "pause", APP, "tick_0").returncode == 0
    assert cli_json(env, "list", APP)["schedules"][0]["paused"] is True
    epoch_a = first.leader_pids()[-1][1]

    def paused_by(epoch: int) -> list[dict[str, Any]]:
        return [
            e for e in history_entries(env, "tick_0", "-n", "200") if e["outcome"] == "paused" and e["epoch"] == epoch
        ]

    wait_for(lambda: len(paused_by(epoch_a)) >= 2, timeout=60, what="paused ticks by the first leader")
    assert first.terminate() == 0
    epoch_b = wait_for(lambda: second.leader_pids() and second.leader_pids()[-1][1], timeout=60, what="a new leader")
    assert epoch_b > epoch_a
    wait_for(lambda: len(paused_by(epoch_b)) >= 2, timeout=60, what="paused ticks by the new leader")

    result = cli_json(env, "resume", APP, "tick_0")
    assert result["changed"] is True and result["paused"] == []
    resumed_at = now_ms()
    wait_for(lambda: [e for e in history.enqueues() if e.tick_ms > resumed_at], timeout=60, what="firing after resume")

    paused_ticks = sorted(
        dt_ms(e["tick"]) for e in history_entries(env, "tick_0", "-n", "500") if e["outcome"] == "paused"
    )
    enqueued = [e.tick_ms for e in history.enqueues()]
    assert not [t for t in enqueued if paused_ticks[0] <= t <= paused_ticks[-1]], "a paused tick was enqueued"
    assert all(t in paused_ticks for t in range(paused_ticks[0], paused_ticks[-1] + 1, 1000)), "a gap while paused"
    fired_after = [e for e in history_entries(env, "tick_0", "-n", "5") if e["outcome"] in ("fired", "caught_up")]
    assert fired_after and {e["epoch"] for e in fired_after} == {epoch_b}


def dt_ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


# -- status without a leader -----------------------------------------------


def test_status_exits_non_zero_once_no_leader_renewed_within_the_lease(
    redis_server: RedisServer, record_dir: str, instances: Any
) -> None:
    """Given a running leader, status exits 0; When every process is killed
    (nothing released) and the lease runs out, Then status says there is no
    leader and exits 1."""
    env = app_env(redis_server, record_dir)
    instance = instances(env)
    wait_for(lambda: redis_server.client().exists(LEASE), timeout=20, what="a leader")
    assert cli(env, "status", APP).returncode == 0

    instance.kill9()
    wait_for(lambda: not redis_server.client().exists(LEASE), timeout=60, what="the lease to expire")
    result = cli(env, "status", APP)
    assert result.returncode == 1, result.stderr
    assert "NO LEADER" in result.stdout
    data = json.loads(cli(env, "status", APP, "--json").stdout)
    assert data["healthy"] is False and data["leader"] is None


def test_status_says_when_no_replica_acknowledges_the_schedulers_writes(
    redis_server: RedisServer, record_dir: str
) -> None:
    """Given the record a candidate whose writes lack replicas refreshes
    (durable claims), status prints why nothing fires, and --json has it."""
    env = app_env(redis_server, record_dir)
    now = int(redis_server.client().time()[0]) * 1000
    fields = {"member": "web-1|4242|abc", "acked": 0, "required": 1, "since": now - 12_000, "at": now}
    redis_server.client().hset("{dramatiq-cron}:replicas", mapping=fields)
    result = cli(env, "status", APP)
    assert "Replicas:   0 of 1 Redis replica(s) acknowledge the writes of web-1 pid 4242" in result.stdout, (
        result.stdout
    )
    data = json.loads(cli(env, "status", APP, "--json").stdout)
    assert data["replicas_lacking"]["required"] == 1 and data["replicas_lacking"]["pid"] == 4242
