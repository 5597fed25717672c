"""A claim whose reply was lost, settled after its runtime definition was
removed, enqueues nothing of it (found by the leader model, issue 32's
round): the settled grants pass the same check as a retry, and a tick of a
removed definition is dropped (recorded in the history), not enqueued.

The model's own rules, replayed in the order the model found."""

from __future__ import annotations

from tests.test_leader_model import LeaderModel


def test_a_lost_claim_settled_after_a_remove_enqueues_nothing_of_it() -> None:
    """Given a runtime schedule edited and edited back, and a leader's turn
    whose claim runs in the store but loses its reply, when the schedule is
    removed before the next turn settles that claim, then nothing of it is
    enqueued after the removal, and every other invariant of the model
    holds."""
    state = LeaderModel()
    try:
        state.reshape_there_and_back(gap=457, name="a")
        for _ in range(3):
            state.quiesce()
        state.faulty_turn(before=86, late=0, lose=True, operation="claim", which=0)
        state.remove(name="a")
        state.quiesce()
        state.nothing_after_remove()
        state.at_most_once()
        state.never_early()
        state.no_bug()
        state.starts_from_its_write()
    finally:
        state.teardown()
