"""Fast takeover checks at least every ``fast_takeover`` ms although Redis
ends a blocking wait late (issue 32: BLPOP of 250 ms took ~300-350 ms at
the default ``hz 10``, so a kill -9 was noticed up to 350 ms later).

Logic on a fake lease and an injected clock: each blocking wait ends
:data:`REDIS_LATE_MS` after its timeout, as Redis may end it.
"""

from __future__ import annotations

import itertools
import logging

import pytest

from dramatiq_cron_middleware.leader.following import REDIS_LATE_MS, Follower, fast_slice_ms
from dramatiq_cron_middleware.leader.reports import Flapping, Reports
from dramatiq_cron_middleware.stop_request import StopRequest
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.lease import Held
from dramatiq_cron_middleware.store.timing import Timing


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _LateLease:
    """Another holds the lease; every blocking wait ends late; the presence
    checks are recorded by the fake clock's time."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.checks: list[float] = []

    def acquire(self) -> Held:
        return Held(remaining_ms=2000, token="other", renewals="1")

    def wait_for_release(self, timeout_ms: int) -> bool:
        self.clock.now += (timeout_ms + REDIS_LATE_MS) / 1000
        return False

    def depose_if_gone(self) -> bool:
        self.checks.append(self.clock.now)
        return False


class _Owed:
    def pay(self) -> None:
        pass

    def next_try(self) -> float | None:
        return None


@pytest.mark.parametrize("interval_ms", [50, 250, 1000])
def test_presence_checks_are_at_most_an_interval_apart_when_redis_ends_waits_late(interval_ms: int) -> None:
    """Given fast_takeover=``interval_ms`` and a Redis that ends every
    blocking wait 100 ms late, when a follower waits out a 2 s lease, then
    no two presence checks are further apart than the interval (at least
    REDIS_LATE_MS + half the interval for intervals below Redis's lateness)."""
    clock = _Clock()
    lease = _LateLease(clock)
    follower = Follower(
        lease=lease,  # type: ignore[arg-type]
        timing=Timing.for_lease(2000, fast_takeover_ms=interval_ms),
        reports=Reports.to(logging.getLogger("test"), Keys("test"), losses=Flapping(monotonic=clock)),
        owed=_Owed(),  # type: ignore[arg-type]
        stopping=StopRequest(clock=clock),
        monotonic=clock,
    )
    started = clock.now
    assert follower.follow() is None
    checks = [started, *lease.checks]
    gaps_ms = [round((b - a) * 1000) for a, b in itertools.pairwise(checks)]
    assert len(gaps_ms) >= 2, gaps_ms
    bound = max(interval_ms, fast_slice_ms(interval_ms) + REDIS_LATE_MS)
    assert max(gaps_ms) <= bound, gaps_ms
    if interval_ms > 2 * REDIS_LATE_MS:
        assert max(gaps_ms) <= interval_ms, gaps_ms
