"""Every duration comes from one place, in the ratios the design gives."""

from __future__ import annotations

import pytest

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.store.timing import Timing


@pytest.mark.parametrize("lease_ms", [300, 2000, 15_000, 60_000])
def test_every_duration_is_derived_from_the_lease(lease_ms: int) -> None:
    t = Timing.for_lease(lease_ms)
    lease = lease_ms / 1000
    # Renewed every two fifths at most, every third at least, and later
    # than a third only while an attempt and its retry still time out
    # before the firing deadline.
    assert lease / 3 - 1e-9 <= t.renew_interval <= 2 * lease / 5 + 1e-9
    if t.renew_interval > lease / 3 + 1e-9:
        assert t.renew_interval + 2 * t.op_timeout_ms / 1000 <= t.fire_deadline + 1e-9
    assert Timing.for_lease(15_000).renew_interval == pytest.approx(6.0)
    assert t.fire_deadline == pytest.approx(2 * lease / 3)
    assert t.retry_interval == pytest.approx(min(1.0, lease / 6))
    assert 100 <= t.op_timeout_ms <= 2000 and t.op_timeout_ms < lease_ms
    assert t.failover_delay == pytest.approx(lease)
    # A follower waits out a lease nobody renews on its own clock, a little
    # longer than the lease, never shorter.
    assert lease < t.stale_after <= lease + 2.0
    # The leader stops firing well before its lease can have expired.
    assert t.fire_deadline < lease
    # A live follower refreshes its entry about once per lease: it counts as
    # live for two, operators see it for three, and it is forgotten after ten.
    assert (t.candidate_live_ms, t.candidate_listed_ms, t.candidate_forgotten_ms) == (
        2 * lease_ms,
        3 * lease_ms,
        10 * lease_ms,
    )


def test_the_middleware_hands_out_one_timing() -> None:
    middleware = CronMiddleware(redis="redis://127.0.0.1:1/0", lock_ttl=3000)
    assert middleware.timing == Timing.for_lease(3000)
