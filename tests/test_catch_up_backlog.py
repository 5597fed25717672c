"""After a long outage the leader works off the backlog in bounded batches,
keeps its lease while doing so, and enqueues every tick once.

Reproduces the review's livelock: 300 per-second schedules whose last
decided tick is five minutes old, a 2 s lease.  The old leader built a claim
for every due tick before sending anything, passed its own firing deadline,
dropped the batch, lost the lease, and the next leader did the same: 0
enqueues, the epoch climbing, forever.  Later, on a loaded machine, batches
of a fixed 1,000 claims outlasted the lease (epoch 8 where 6 was expected):
batches are now bounded in time too, which tests/test_catch_up_pace.py
shows deterministically on a fake clock.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from dramatiq_cron_middleware.leader.firing import BATCH_LIMIT
from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

SCHEDULES = 300
BACKLOG_MS = 300_000


@pytest.mark.slow
def test_a_five_minute_backlog_of_300_schedules_is_caught_up_while_the_lease_is_kept(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    client.config_set("slowlog-log-slower-than", 20_000)  # µs
    client.slowlog_reset()
    crons = {f"job{i}": "* * * * * *" for i in range(SCHEDULES)}
    with in_process_app(redis_server.url, crons, lock_ttl=2000, start=False) as app:
        # Given: the ledger as a five-minute outage leaves it.
        server_now = int(client.time()[0]) * 1000
        old = server_now - BACKLOG_MS
        client.set(app.keys.epoch, 5)
        client.hset(
            app.keys.ticks,
            mapping={s.id: f"{old}:5:1" for s in app.middleware.all_schedules()},
        )
        # The ticks due at the start, but the first minute's: those fall out
        # of the five-minute catch-up window while the leader starts (one
        # "missed" entry each).
        backlog = {(f"job{i}", tick) for i in range(SCHEDULES) for tick in range(old + 60_000, server_now + 1, 1000)}
        missing = set(backlog)
        read = 0

        def caught_up() -> bool:
            nonlocal read
            sent = app.sent()
            missing.difference_update((actor, _ms(tick)) for actor, tick, _ in sent[read:])
            read = len(sent)
            return not missing

        # When: a leader starts.
        started = time.monotonic()
        app.middleware.start(app.broker)
        wait_for(caught_up, timeout=240, interval=0.5, what=f"the backlog ({len(missing)} ticks missing)")
        took = time.monotonic() - started
        # Then: one leadership the whole time, and every schedule fires on
        # time again.
        assert int(client.get(app.keys.epoch) or 0) == 6, "leadership changed while catching up"
        assert app.leader.epoch == 6
        mark = len(app.sent())
        wait_for(lambda: len(app.sent()) >= mark + SCHEDULES * 2, timeout=60, what="on-time ticks after the backlog")
        assert not app.warnings("Lost cron leadership")
        assert app.duplicates() == []
        # Every claim batch Redis ran is bounded (their result records stay
        # ten minutes): no script holds Redis for long.  A schedule's ticks
        # past the window add one "missed" claim to the firing ones.
        sizes = [len(str(client.get(key)).split(",")) for key in client.scan_iter(f"{app.keys.tag}:batch:*")]
    assert sizes and max(sizes) <= BATCH_LIMIT + 1, f"a batch of {max(sizes)} claims"
    slowest = max(
        (int(e["duration"]) for e in client.slowlog_get(128) if "EVALSHA" in str(e["command"]).upper()), default=0
    )
    print(
        f"\n[backlog] {len(app.sent())} enqueues, caught up in {took:.1f} s, {len(sizes)} batches "
        f"(largest {max(sizes)}), slowest script {slowest / 1000:.1f} ms"
    )


def _ms(tick: str) -> int:
    return int(datetime.fromisoformat(tick).timestamp() * 1000)
