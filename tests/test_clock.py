"""The server clock never runs ahead of Redis and is deaf to its steps:
in-process, with injected monotonic and wall clocks."""

from __future__ import annotations

from dramatiq_cron_middleware.store.clock import WALL_VOUCH_MS, ServerClock, StepKind

T0 = 1_800_000_000_000  # server ms at monotonic 0


class Clocks:
    """A monotonic and a wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.mono = 0.0
        self.wall = T0 / 1000

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def make() -> tuple[ServerClock, Clocks, list[object]]:
    clocks = Clocks()
    steps: list[object] = []
    clock = ServerClock(monotonic=lambda: clocks.mono, wall=lambda: clocks.wall, on_step=steps.append)
    return clock, clocks, steps


def test_a_reply_delayed_by_a_stalled_redis_never_moves_the_clock_ahead() -> None:
    """Given a command sent while Redis is paused (``CLIENT PAUSE 3500
    WRITE``), when Redis runs it at the end of the pause and reads its clock
    then, and the reply arrives at once, then the estimate is not ahead of
    the server: the old midpoint anchor put it 1.75 s ahead."""
    clock, clocks, _ = make()
    clocks.mono = 13.5
    clock.observe(T0 + 13_500, 10.0, 13.5)
    assert clock.now_ms() <= T0 + 13_500


def test_the_first_reply_anchors_at_its_receive_instant() -> None:
    """The midpoint of a long round trip may lie before the server read its
    clock; the receive instant never does."""
    clock, clocks, _ = make()
    clock.observe(T0, 0.0, 2.0)  # read at 2.0 at the latest
    clocks.mono = 2.0
    assert clock.now_ms() == T0


def test_a_forward_step_away_from_the_wall_clock_is_ignored_and_logged_once() -> None:
    """Given a clock in line with Redis, when Redis's clock jumps an hour
    ahead (and this host's wall clock does not), then the estimate keeps its
    own timeline, the step is reported once however many replies repeat it,
    and when the step is undone the clock says it is back in line."""
    clock, clocks, steps = make()
    clock.observe(T0, 0.0, 0.0)
    for second in range(1, 7):
        clocks.advance(1)
        clock.observe(T0 + second * 1000 + 3_600_000, clocks.mono, clocks.mono)
        assert abs(clock.now_ms() - (T0 + second * 1000)) <= 1
    assert [s.kind for s in steps] == [StepKind.FORWARD_IGNORED]  # type: ignore[attr-defined]
    assert clock.ignoring_step
    clocks.advance(1)
    clock.observe(T0 + 7000, clocks.mono, clocks.mono)
    assert [s.kind for s in steps] == [StepKind.FORWARD_IGNORED, StepKind.BACK_IN_LINE]  # type: ignore[attr-defined]
    assert not clock.ignoring_step
    assert clock.now_ms() == T0 + 7000


def test_a_forward_step_towards_the_wall_clock_is_followed() -> None:
    """Given a Redis whose clock ran a minute slow (this host's wall clock
    is right), when Redis's clock is corrected forward, then the estimate
    follows the correction."""
    clock, clocks, steps = make()
    clock.observe(T0 - 60_000, 0.0, 0.0)  # Redis a minute slow
    clocks.advance(1)
    clock.observe(T0 + 1000, clocks.mono, clocks.mono)  # corrected
    assert [s.kind for s in steps] == [StepKind.FORWARD_FOLLOWED]  # type: ignore[attr-defined]
    assert clock.now_ms() == T0 + 1000


def test_no_claim_lies_after_the_server_time_after_a_backward_step() -> None:
    clock, clocks, steps = make()
    clock.observe(T0, 0.0, 0.0)
    clocks.advance(1)
    clock.observe(T0 + 1000 - 40_000, clocks.mono, clocks.mono)
    assert [s.kind for s in steps] == [StepKind.BACKWARD]  # type: ignore[attr-defined]
    assert clock.now_ms() == T0 + 1000 - 40_000


def test_small_disagreements_are_drift_not_steps() -> None:
    """A reply consistent with the estimate within the step threshold moves
    the anchor back to the lower bound at most, and reports nothing."""
    clock, clocks, steps = make()
    clock.observe(T0, 0.0, 0.0)
    clocks.advance(100)
    clock.observe(T0 + 100_000 - 300, clocks.mono, clocks.mono)  # the server ran 3 ms/s slow
    assert steps == []
    assert clock.now_ms() == T0 + 100_000 - 300
    clocks.advance(1)
    clock.observe(T0 + 101_000 + 200, clocks.mono - 0.5, clocks.mono)  # fits the round trip
    assert steps == []
    assert clock.now_ms() <= T0 + 101_000 + 200


def test_after_a_backward_step_firing_waits_for_redis_and_genuine_entries_are_not_future() -> None:
    """Given Redis's clock stepped 40 s back (away from this host's wall
    clock), then ticks are asked for only once Redis's clock reaches them
    (``now_ms`` follows the server), while ``trusted_ms`` keeps the timeline:
    a ledger entry fired a second ago is not taken for a future artefact and
    rebased (which made the next leader fire the last 40 s again)."""
    clock, clocks, steps = make()
    clock.observe(T0, 0.0, 0.0)
    clocks.advance(1)
    clock.observe(T0 + 1000 - 40_000, clocks.mono, clocks.mono)
    assert [s.kind for s in steps] == [StepKind.BACKWARD]  # type: ignore[attr-defined]
    assert clock.now_ms() == T0 + 1000 - 40_000
    assert clock.trusted_ms() == T0 + 1000


def test_a_backward_step_towards_the_wall_clock_is_followed() -> None:
    """Redis ran a minute fast and is corrected: the timeline follows."""
    clock, clocks, steps = make()
    clock.observe(T0 + 60_000, 0.0, 0.0)
    clocks.advance(1)
    clock.observe(T0 + 1000, clocks.mono, clocks.mono)
    assert [s.kind for s in steps] == [StepKind.BACKWARD_FOLLOWED]  # type: ignore[attr-defined]
    assert clock.now_ms() == clock.trusted_ms() == T0 + 1000


def test_a_host_clock_far_ahead_does_not_vouch_for_a_ledger_entry_as_far_ahead() -> None:
    """Given this host's wall clock an hour ahead of Redis (and never a step
    seen), a ledger entry an hour ahead is an artefact to rebase, not a tick
    the scheduler may have fired: ``trusted_ms`` takes the wall clock only
    within WALL_VOUCH_MS of the Redis timeline (the soak found a schedule
    silent for an hour: the poisoned entry, an hour ahead, was trusted)."""
    clock, clocks, _ = make()
    clocks.wall += 3600
    clock.observe(T0, 0.0, 0.0)
    clocks.advance(1)
    clock.observe(T0 + 1000, clocks.mono, clocks.mono)
    assert clock.trusted_ms() == T0 + 1000 + WALL_VOUCH_MS


def test_a_host_clock_slightly_ahead_still_vouches_for_entries_a_fresh_process_never_saw() -> None:
    """Given a process that starts after Redis's clock stepped 40 s back (it
    never saw the later time), its wall clock still vouches for the genuine
    entries of the last 40 s, so they are not rebased and fired again."""
    clock, _, _ = make()
    clock.observe(T0 - 40_000, 0.0, 0.0)
    assert clock.trusted_ms() == T0
