"""A claim whose reply is held past the firing deadline: the leader steps
down before it learns what Redis granted, and settles the batch as a
follower.  The granted ticks are still this process's alone to enqueue.

The fault is an asymmetric one (an asymmetric partition, or a Redis that
stalls after running the command): the proxy delivers every request at
once and holds every reply for longer than the firing deadline, from just
before a tick.  The claim runs and records its ticks as fired; the leader
sees a timeout, fails to renew, steps down (its tick queue drops what it
knew), and settles the batch from ``{p}:batch:<id>`` once replies flow
again.  Judged from the history stream: every tick Redis recorded as fired
reached the broker exactly once.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from typing import Any

import pytest
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware.store.boundary import Boundary
from tests.support.inprocess import InProcessApp, in_process_app
from tests.support.instances import wait_for
from tests.support.proxy import Proxy
from tests.support.redis_server import RedisServer

ACTORS = {f"job{i}": "* * * * * *" for i in range(3)}
#: Lease 3 s: the firing deadline is 2 s after the last renewal was sent.
TTL_MS = 3000
#: Longer than the firing deadline.
HOLD_MS = 2500
CYCLES = 2


def history(server: RedisServer, app: InProcessApp) -> list[dict[str, str]]:
    entries: list[tuple[str, dict[str, str]]] = server.client().xrange(app.keys.history)  # type: ignore[assignment]
    return [fields for _, fields in entries]


def granted(server: RedisServer, app: InProcessApp) -> set[str]:
    """Message ids of every tick the ledger recorded as fired."""
    return {f["message_id"] for f in history(server, app) if f.get("outcome") in ("fired", "caught_up")}


def hold_replies_over_a_tick(server: RedisServer, proxy: Proxy, app: InProcessApp) -> bool:
    """From 30 ms before a tick, hold every reply for :data:`HOLD_MS`, so
    the tick's claim runs and its reply arrives after the firing deadline;
    wait until this process leads and fires again.  Whether the fault hit
    a claim: a tick after the hold began granted to the epoch that then
    stepped down (a renewal or a settle may take the lost reply instead)."""
    stepped_down = len(app.logged("Lost cron leadership"))
    time.sleep((0.97 - time.time() % 1) % 1)  # to 30 ms before the next tick
    began_ms = int(time.time() * 1000)
    proxy.set_reply_delay(HOLD_MS)
    time.sleep(HOLD_MS / 1000)  # the fault's own length
    proxy.heal()
    lines = wait_for(
        lambda: app.logged("Lost cron leadership")[stepped_down:],
        timeout=60,
        what="the leader to step down while its claim's reply was held",
    )
    epoch = lines[0].split("(epoch ")[1].split(")")[0]
    mark = len(app.sent())
    wait_for(lambda: len(app.sent()) > mark + len(ACTORS), timeout=20, what="ticks fired after the fault")
    return any(f["epoch"] == epoch and int(f["tick"]) > began_ms for f in history(server, app))


@pytest.fixture(params=["plain", "redis-elsewhere"])
def broker(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Boundary]]:
    """A plain broker (a StubBroker: one ``broker.enqueue`` each), or a
    RedisBroker on a Redis other than the lease's (idempotent pushes)."""
    if request.param == "plain":
        yield StubBroker(), Boundary.PLAIN
        return
    with RedisServer() as broker_redis:
        yield RedisBroker(url=broker_redis.url), Boundary.IDEMPOTENT


@pytest.mark.slow
def test_ticks_granted_to_a_claim_whose_reply_outlived_the_firing_deadline_are_enqueued_once(
    redis_server: RedisServer, broker: tuple[Any, Boundary]
) -> None:
    """Given a leader whose claim's reply is held longer than its firing
    deadline (it steps down first), when replies flow again and it settles
    the batch, then every tick Redis granted is enqueued exactly once, and
    no ERROR is logged."""
    instance, mode = broker
    with Proxy(redis_server.port, max_lifetime=300) as proxy:
        with in_process_app(proxy.url, ACTORS, lock_ttl=TTL_MS, broker=instance) as app:
            assert app.leader.boundary.mode == mode
            wait_for(lambda: len(app.sent()) >= 2 * len(ACTORS), timeout=60, what="a first round of ticks")
            hits = 0
            for _ in range(3 * CYCLES):
                hits += hold_replies_over_a_tick(redis_server, proxy, app)
                if hits == CYCLES:
                    break
            assert hits == CYCLES, f"the held replies hit a claim in {hits} of {3 * CYCLES} tries"
            fired = granted(redis_server, app)
            sent = collections.Counter(message_id for _, _, message_id in app.sent())
            errors = app.errors()
    never = fired - set(sent)
    twice = [m for m, n in sent.items() if n > 1]
    assert not never, f"{len(never)} of {len(fired)} granted ticks were never enqueued"
    assert not twice, f"{len(twice)} ticks enqueued more than once"
    assert not errors, f"the leader loop failed: {errors[:2]}"
