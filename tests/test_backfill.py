"""``dramatiq-cron backfill`` against a real Redis, with real ``dramatiq``
workers where the leader must have fired first, and the command run as
real processes (two at once; one killed with SIGKILL half-way).

Every enqueue is recorded by the test app's ``after_enqueue`` hook in the
process that enqueued it (the worker for the leader's ticks, the command
for backfilled ones), so duplicates are judged across all processes.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import pty
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware.backfill import Backfill
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.store.codes import decode, load_script
from dramatiq_cron_middleware.store.connection import scheduler_clients
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.operator import RedisOperator
from tests.support.instances import ROOT, History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, app_env, cli, cli_json

SCHEDULE = "tick_0"


def backfill_command(env: dict[str, str], start_ms: int, end_ms: int, *extra: str) -> subprocess.Popen[str]:
    """The command as a process of its own (its own group, to SIGKILL)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dramatiq_cron_middleware", "backfill", APP, SCHEDULE,
         "--from", str(start_ms), "--to", str(end_ms), "--json", *extra],
        cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def counts(history: History) -> collections.Counter[int]:
    return collections.Counter(e.tick_ms for e in history.enqueues() if e.schedule == SCHEDULE)


def test_a_backfill_over_fired_ticks_enqueues_only_the_missing_ones(
    redis_server: RedisServer, record_dir: str, history: History, instances: Callable[..., Instance]
) -> None:
    """Given a worker that fired a per-second schedule for a few seconds
    and was stopped, When an operator backfills a range that starts ten
    seconds before its first fire and ends after its last, Then only the
    ticks before the first fire are enqueued, each once, marked as a
    backfill and recorded ``backfilled``, And the fired ones are left out;
    a second run enqueues nothing."""
    env = app_env(redis_server, record_dir)
    worker = instances(env)
    wait_for(lambda: len(counts(history)) >= 3, timeout=20, what="three fired ticks")
    assert worker.terminate() == 0
    fired = sorted(counts(history))
    start, end = fired[0] - 10_000, fired[-1] + 1000

    done = finish(backfill_command(env, start, end))

    by_tick = counts(history)
    assert [t for t, n in by_tick.items() if n > 1] == []
    backfilled = sorted(e.tick_ms for e in history.enqueues() if e.backfill)
    assert backfilled == list(range(fired[0] - 10_000, fired[0], 1000))
    assert len(done["enqueued"]) == 10 and len(done["left_out"]["fired"]) == len(fired)  # type: ignore[arg-type,index]
    outcomes = collections.Counter(e["outcome"] for e in cli_json(env, "history", APP, "-n", "100")["entries"])
    assert outcomes["backfilled"] == 10

    again = finish(backfill_command(env, start, end))
    assert again["enqueued"] == [] and sorted(counts(history)) == sorted([*fired, *backfilled])

    # --include-fired runs the fired ticks once more, as messages of their
    # own; a second such run adds nothing.
    rerun = finish(backfill_command(env, start, end, "--include-fired"))
    assert sorted(int(_ms(t)) for t in rerun["enqueued"]) == fired  # type: ignore[attr-defined]
    assert finish(backfill_command(env, start, end, "--include-fired"))["enqueued"] == []
    ids = collections.defaultdict(set)
    for e in history.enqueues():
        ids[e.tick_ms].add(e.message_id)
    assert all(len(ids[t]) == 2 for t in fired) and all(counts(history)[t] == 2 for t in fired)


def test_two_concurrent_backfills_enqueue_each_tick_once(
    redis_server: RedisServer, record_dir: str, history: History
) -> None:
    """Given a schedule's 600 ticks of an hour ago, When two operators run
    the same backfill at the same moment, Then every tick is enqueued
    exactly once between the two processes."""
    env = app_env(redis_server, record_dir)
    start = (now_ms() // 1000 - 3600) * 1000
    procs = [backfill_command(env, start, start + 600_000) for _ in range(2)]
    try:
        reports = [finish(p) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert sorted(counts(history).items()) == [(start + 1000 * i, 1) for i in range(600)]
    assert sum(len(r["enqueued"]) for r in reports) == 600  # type: ignore[arg-type]


def test_a_backfill_killed_half_way_then_run_again_adds_no_duplicate(
    redis_server: RedisServer, record_dir: str, history: History
) -> None:
    """Given a backfill of 5000 ticks killed with SIGKILL once 500 were
    enqueued, When it is run again, Then no tick is enqueued twice, And
    tick missing is named by the second run as claimed by the interrupted
    one without a confirmed enqueue (at most one batch)."""
    env = app_env(redis_server, record_dir)
    start = (now_ms() // 1000 - 7200) * 1000
    end = start + 5_000_000
    first = backfill_command(env, start, end)
    try:
        wait_for(lambda: len(counts(history)) >= 500 or first.poll() is not None, timeout=60, what="500 enqueues")
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL, "the backfill finished before it could be killed half-way"
    interrupted = set(counts(history))
    assert 500 <= len(interrupted) < 5000

    second = finish(backfill_command(env, start, end))

    by_tick = counts(history)
    assert [t for t, n in by_tick.items() if n > 1] == []
    unconfirmed = {int(_ms(t)) for t in second["left_out"]["unconfirmed"]}  # type: ignore[index]
    assert len(unconfirmed) <= 100  # one batch, some of which went out before the kill
    assert set(by_tick) | unconfirmed == set(range(start, end, 1000))


def test_bad_ranges_are_refused_naming_the_value_without_a_traceback(
    redis_server: RedisServer, record_dir: str
) -> None:
    env = app_env(redis_server, record_dir)
    now = now_ms()
    cases = {
        ("--from", str(now - 1000), "--to", str(now - 5000)): "the range must end after it starts",
        ("--from", str(now - 1000)): "an open range cannot be backfilled",
        ("--from", str(now - 20_000_000), "--to", str(now)): "holds 20,000 ticks",
    }
    for args, expected in cases.items():
        result = cli(env, "backfill", APP, SCHEDULE, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    dry = cli_json(env, "backfill", APP, SCHEDULE, "--from", str(now - 20_000_000), "--to", str(now), "--yes",
                   "--dry-run")  # fmt: skip
    assert len(dry["ticks"]) > 10_000 and redis_server.client().exists("{dramatiq-cron}:history") == 0


def _ms(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp() * 1000


def test_a_claim_retried_after_a_lost_reply_gets_its_own_ticks_back(redis_server: RedisServer) -> None:
    """Given a backfill's claim that ran but whose reply was lost, When the
    same call is sent again (redis-py retries a timed-out command once),
    Then it gets its ticks back as claimed, And another run gets none."""
    client = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)[0]
    keys = Keys("dramatiq-cron")
    script = load_script(client, "backfill")

    def claim(token: str) -> list[int]:
        reply = decode(script(keys=[keys.ticks, keys.backfilled("job"), keys.runtime_revs],
                              args=["job", "", 0, "[1000, 2000]", token]))  # fmt: skip
        return [int(r) for r in reply.payload]

    assert claim("run-1") == [1, 1]
    assert claim("run-1") == [1, 1]
    assert claim("run-2") == [0, 0]


class FailingBroker(StubBroker):
    """A broker whose enqueue fails from the ``fail_from``-th message on."""

    def __init__(self, fail_from: int) -> None:
        super().__init__()
        self.fail_from = fail_from
        self.sent: list[dramatiq.Message[Any]] = []

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        if len(self.sent) + 1 >= self.fail_from:
            raise ConnectionError("the broker is down")
        self.sent.append(message)
        return message


def test_ticks_whose_enqueue_failed_are_released_and_the_next_run_enqueues_them(redis_server: RedisServer) -> None:
    """Given a backfill of 30 ticks whose broker fails at the 11th message,
    Then the run stops with the broker's error, the 10 sent are recorded
    ``backfilled`` and the 20 others are released, not lost, And a second
    run with a working broker enqueues exactly those 20."""
    client = scheduler_clients(redis_server.url, op_timeout_ms=1000, block_timeout_ms=0)[0]
    control = RedisOperator(client=client, keys=Keys("dramatiq-cron"))
    schedule = bind_schedule("job", "default", "* * * * * *", timezone="UTC", catch_up="each", catch_up_window=1000)
    backfill = Backfill(control, prefix="dramatiq-cron")
    start = (control.server_ms() // 1000 - 600) * 1000
    failing = FailingBroker(fail_from=11)
    with pytest.raises(ConnectionError):
        backfill.run(failing, backfill.plan(schedule, start_ms=start, end_ms=start + 30_000))
    assert len(failing.sent) == 10
    assert [e.outcome for e in control.history(limit=100)] == ["backfilled"] * 10

    working = FailingBroker(fail_from=10**9)
    plan = backfill.plan(schedule, start_ms=start, end_ms=start + 30_000)
    assert len(plan.fired) == 10 and plan.unconfirmed == []
    report = backfill.run(working, plan)
    sent = {m.options["cron_tick"] for m in [*failing.sent, *working.sent]}
    assert len(report.enqueued) == 20 and len(sent) == 30 and all(m.options["cron_backfill"] for m in working.sent)


def test_the_progress_bar_goes_to_stderr_only_on_a_terminal(redis_server: RedisServer, record_dir: str) -> None:
    env = app_env(redis_server, record_dir)
    start = (now_ms() // 1000 - 3600) * 1000
    args = ["backfill", APP, SCHEDULE, "--from", str(start), "--to", str(start + 300_000)]
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dramatiq_cron_middleware", *args],
            cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=follower, text=True,
        )  # fmt: skip
        os.close(follower)
        out, _ = proc.communicate(timeout=60)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
    assert proc.returncode == 0 and "Backfilled 300 tick(s)" in out
    assert b"Backfilling tick_0 [" in shown and b"] 300/300" in shown
    piped = cli(env, *args[:-4], "--from", str(start + 300_000), "--to", str(start + 400_000))
    assert piped.returncode == 0 and piped.stderr == ""


def test_how_far_back_the_history_reaches_is_known_on_every_redis(redis_server: RedisServer) -> None:
    """Given a history stream capped at 50 entries (as every script writes
    it, ``MAXLEN ~``): while it holds fewer, it was never trimmed and every
    tick since the start is known (Redis 7 counts what was added; on 6.2 the
    length below the cap tells it); once trimmed, ticks before its first
    entry are unknown (they need ``--include-fired``)."""
    client = redis_server.client()
    keys = Keys("reach")
    store = RedisOperator(client=client, keys=keys, history_length=50)
    start = 1_700_000_000_000
    for i in range(10):
        client.xadd(keys.history, {"schedule": "job", "tick": str(start + i)}, id=f"{start + 1000 + i}-0", maxlen=50)
    assert store.history_reach(start) is None
    for i in range(10, 500):
        client.xadd(
            keys.history,
            {"schedule": "job", "tick": str(start + i)},
            id=f"{start + 1000 + i}-0",
            maxlen=50,
            approximate=True,
        )
    first_ms = int(str(client.xrange(keys.history, count=1)[0][0]).split("-")[0])
    assert first_ms > start + 1000
    assert store.history_reach(start) == first_ms


def test_a_backfill_of_ten_years_of_seconds_says_the_count_then_claims_at_once(
    redis_server: RedisServer, record_dir: str, history: History
) -> None:
    """Given a per-second schedule, When ``backfill --yes`` covers ten years
    (315 million ticks), Then it says how many ticks before it starts and
    enqueues its first ticks while the rest of the range is still unread
    (streamed a thousand at a time: the whole list would take hours and
    gigabytes first), And Ctrl+C stops it with exit 130, no tick twice."""
    env = app_env(redis_server, record_dir)
    end = (now_ms() // 1000) * 1000
    start = end - 10 * 365 * 86_400_000
    proc = backfill_command(env, start, end, "--yes")
    try:
        wait_for(lambda: len(counts(history)) >= 300 or proc.poll() is not None, timeout=120, what="300 enqueues")
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines()[0].startswith("Backfilling 315,360,000 tick(s) of tick_0"), err
    enqueued = counts(history)
    assert [t for t, n in enqueued.items() if n > 1] == []
    assert min(enqueued) == start  # oldest first
