"""After a long outage the leader works off the backlog in bounded batches,
keeps its lease while doing so, and enqueues every tick once.

Reproduces the review's livelock: 300 per-second schedules whose last
decided tick is five minutes old, a 2 s lease.  The old leader built a claim
for every due tick before sending anything, passed its own firing deadline,
dropped the batch, lost the lease, and the next leader did the same: 0
enqueues, the epoch climbing, forever.  Later, on a loaded machine, batches
of a fixed 1,000 claims outlasted the lease (epoch 8 where 6 was expected):
batches are now bounded in time too, and a renewal goes before every
batch of a backlog after the first, which tests/test_catch_up_pace.py
shows deterministically on a fake clock.

What is left is the machine: under a load of 15 on two cores the leader
thread, runnable, waited 1.6 s for a CPU inside one batch's planning (a
full collection of this test's heap, 0.08 s of CPU), and its next renewal
came 2.5 s after the one before: past the lease.  So the test records
every renewal and the leader thread's run-queue wait (Linux schedstat),
and a change of leadership passes only where a renewal came after its
firing deadline and the thread had been runnable without a CPU for
longer than the renewal was late; every tick is
still enqueued exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from dramatiq_cron_middleware.leader.firing import BATCH_LIMIT
from dramatiq_cron_middleware.store.lease import Acquired, Lease, Renewed
from dramatiq_cron_middleware.store.timing import Timing
from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

SCHEDULES = 300
BACKLOG_MS = 300_000


@pytest.mark.slow
def test_a_five_minute_backlog_of_300_schedules_is_caught_up_while_the_lease_is_kept(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    renewals = _Renewals()
    monkeypatch.setattr(Lease, "renew", renewals.wrap(Lease.renew))
    monkeypatch.setattr(Lease, "acquire", renewals.wrap(Lease.acquire))
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
        # Then: one leadership the whole time, but for terms the machine
        # ended (see above), and every schedule fires on time again.
        epoch = int(client.get(app.keys.epoch) or 0)
        starved = renewals.starved(Timing.for_lease(2000))
        assert epoch - 6 <= len(starved), f"leadership changed while catching up (epoch {epoch}): {renewals.late()}"
        assert app.leader.epoch == epoch
        mark = len(app.sent())
        wait_for(lambda: len(app.sent()) >= mark + SCHEDULES * 2, timeout=60, what="on-time ticks after the backlog")
        assert len(app.warnings("Lost cron leadership")) <= len(starved)
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
        f"(largest {max(sizes)}), slowest script {slowest / 1000:.1f} ms, epoch {epoch}, "
        f"longest between renewals {renewals.longest():.2f} s, starved {starved}"
    )


def _ms(tick: str) -> int:
    return int(datetime.fromisoformat(tick).timestamp() * 1000)


class _Renewals:
    """Each lease call of the leader thread: when it was sent (monotonic
    s), whether it held the lease, and the thread's run-queue wait so far
    (s; None where the kernel does not say)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, bool, float | None]] = []

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(lease: Lease, *args: Any, **kwargs: Any) -> Any:
            sent, waited = time.monotonic(), _run_queue_wait()
            result = call(lease, *args, **kwargs)
            if threading.current_thread().name == "dramatiq-cron-leader":
                self.calls.append((sent, isinstance(result, Acquired | Renewed), waited))
            return result

        return recorded

    def _gaps(self) -> list[tuple[float, float | None]]:
        """(seconds, run-queue wait) from each call that held the lease to
        the next call."""
        out = []
        for (a, held, wait_a), (b, _, wait_b) in zip(self.calls, self.calls[1:], strict=False):
            if held:
                out.append((b - a, None if wait_a is None or wait_b is None else wait_b - wait_a))
        return out

    def late(self) -> list[str]:
        return [f"{gap:.2f} s (run-queue wait {wait})" for gap, wait in self._gaps() if gap > 1.0]

    def longest(self) -> float:
        return max((gap for gap, _ in self._gaps()), default=0.0)

    def starved(self, timing: Timing) -> list[str]:
        """The lease calls that came after the firing deadline (past it
        the leader steps down; past the lease Redis lets it go) while the
        leader thread, runnable, waited for a CPU longer than the call was
        late: without that wait it would have kept within the deadline."""
        return [
            f"{gap:.2f} s, {wait:.2f} s of it runnable without a CPU"
            for gap, wait in self._gaps()
            if wait is not None and gap > timing.fire_deadline and wait > gap - timing.fire_deadline
        ]


def _run_queue_wait() -> float | None:
    """How long this thread has been runnable but not running (Linux)."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None
