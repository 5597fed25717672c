"""The leader host's wall clock stamps nothing: a leader whose clock is a
minute behind loses no message to a consumer's ``max_age``.

dramatiq's ``AgeLimit`` compares the consumer's clock with the message's
``message_timestamp``.  The scheduler stamps with its own clock (Redis
time), which every consumer shares; the leader host's wall clock is the
wrong one.  Messages built ahead of their tick were always stamped right;
the ones built at the fire (the first tick after a takeover, a schedule
longer than a minute, catch-up) were stamped with ``time.time()``.

Real processes: a ``dramatiq`` leader on a wall-clock shim (every
reader of its wall clock is moved, whatever module bound ``time.time``),
listening to no queue, and a consumer on the machine's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.faketime import WallClockShim
from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow

#: The leader's wall clock, against the machine's (seconds).
OFFSET_S = -60
#: Longer than a minute: never built ahead of its tick.
EVERY_MS = 61_000
MAX_AGE_MS = 20_000


@pytest.fixture
def shim() -> Iterator[WallClockShim]:
    clock = WallClockShim()
    clock.step_to(OFFSET_S)
    yield clock
    clock.close()


def fired(server: RedisServer, prefix: str) -> set[tuple[str, int]]:
    """(schedule, tick ms) of every tick the ledger recorded as fired."""
    entries: list[tuple[str, dict[str, str]]] = server.client().xrange(f"{{{prefix}}}:history")  # type: ignore[assignment]
    return {(f["schedule"], int(f["tick"])) for _, f in entries if f.get("outcome") in ("fired", "caught_up")}


def leads(server: RedisServer, prefix: str, instance: Instance) -> bool:
    pid = server.client().hget(f"{{{prefix}}}:lease", "pid")
    return pid is not None and int(pid) in instance.worker_pids()


def test_a_leader_whose_wall_clock_is_a_minute_behind_loses_nothing_to_max_age(
    redis_server: RedisServer,
    app_env: dict[str, str],
    history: History,
    shim: WallClockShim,
    instances: Callable[..., Instance],
) -> None:
    """Given a leader whose wall clock is 60 s behind and a consumer with a
    correct one, actors with ``max_age`` 20 s on a per-second schedule and
    on a 61 s interval, when the leader takes over and fires, then every
    tick it fired runs: the first after the takeover, the on-time ones,
    and a tick of the 61 s schedule (stamped at the fire)."""
    prefix = "wallclock"
    first_long = now_ms() + 12_000
    env = {
        **app_env,
        "CRON_APP_BROKER": redis_server.url,  # in the claim: the default boundary
        "CRON_APP_PREFIX": prefix,
        "CRON_APP_ACTORS": "2",
        "CRON_APP_MAX_AGE": str(MAX_AGE_MS),
        "CRON_APP_EVERY": f"{EVERY_MS}:{first_long % EVERY_MS}",
    }
    leader = instances({**env, **shim.env()}, extra=["--queues", "nothing-here"])
    wait_for(lambda: leads(redis_server, prefix, leader), timeout=30, what="the shimmed instance to lead")
    instances(env)  # the consumer: the machine's clock
    # One tick of the 61 s schedule: a schedule longer than a minute is
    # never built ahead, so every one of its ticks is stamped at the fire
    # (a second tick would only add a minute of waiting).
    wait_for(
        lambda: ("long_tick", first_long) in fired(redis_server, prefix),
        timeout=(first_long - now_ms()) / 1000 + 30,
        what="the 61 s schedule's tick to fire",
    )
    assert leads(redis_server, prefix, leader), "the shimmed instance lost the lease: nothing judged"
    granted = fired(redis_server, prefix)
    assert {"tick_0", "tick_1", "long_tick"} <= {s for s, _ in granted}

    def not_run() -> set[tuple[str, int]]:
        ran = {(r.schedule, r.tick_ms) for r in history.runs()}
        return granted - ran

    try:
        wait_for(lambda: not not_run(), timeout=20, what="every fired tick to run")
    except AssertionError:
        missing = sorted(not_run())
        raise AssertionError(f"{len(missing)} of {len(granted)} fired ticks never ran: {missing[:6]}") from None
