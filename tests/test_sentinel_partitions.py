"""Every two-way partition of a standard Sentinel layout (M, R1, R2,
S1-S3, candidates A leading and B), simulated with the real leader code
(tests/support/sentinel_model.py): with the default rule (``WAIT 1`` and a
majority of the sentinels naming the write's master), no (schedule, tick)
is enqueued twice in any of the 128 layouts, and every tick of the cut is
caught up after the heal.  ``WAIT 1`` alone (the rule before issue 28)
fires the issue's layout twice, and the model shows it.

The table in docs/design.md ("Sentinel partitions") is this enumeration,
condensed: ``python -m tests.support.sentinel_model`` prints it.
"""

from __future__ import annotations

import pytest
import redis

from dramatiq_cron_middleware.store.durability import Ack, Durability, SentinelQuorum, Unconfirmed, required_replicas
from dramatiq_cron_middleware.store.operator import ReplicasLacking
from tests.support.sentinel_model import DEFAULT, REPLICA_ALONE, Outcome, World, partitions

ISSUE_28 = frozenset({"A", "M", "R2", "S1"})


@pytest.mark.slow
@pytest.mark.parametrize("share", [0, 1, 2, 3])
def test_no_two_way_partition_enqueues_a_tick_twice_under_the_default_rule(share: int) -> None:
    """Given each layout of this quarter of the 128, when it is cut for
    15 s and healed: no tick doubles, every tick up to the heal is
    enqueued by the end, and only a side holding the sentinel majority
    fired during the cut."""
    layouts = partitions()[share::4]
    assert len(partitions()) == 128 and len(set(partitions())) == 128
    outcomes: list[Outcome] = []
    for layout in layouts:
        outcome = World(DEFAULT).run(layout)
        print(outcome.row())
        outcomes.append(outcome)
    assert not [o.layout() for o in outcomes if o.doubled], [o.row() for o in outcomes if o.doubled]
    assert not [o.layout() for o in outcomes if o.lost], [o.row() for o in outcomes if o.lost]
    for outcome in outcomes:
        majority = "M" if len({"S1", "S2", "S3"} & outcome.side_with_m) >= 2 else "other"
        assert set(outcome.fired_during_cut) <= {majority}, outcome.row()


def test_the_default_rule_is_the_products_default_on_sentinel() -> None:
    """The model's default is what a Sentinel URL gets: one replica, and
    the sentinel majority (middleware.py builds the SentinelQuorum)."""
    assert required_replicas(None, sentinel=True, key="k") == DEFAULT.replicas == 1
    assert DEFAULT.sentinels


def test_a_replica_alone_fires_the_issues_layout_twice_and_the_default_does_not() -> None:
    """{A, M, R2, S1} | {B, R1, S2, S3}: R2 acknowledges A's WAIT 1 while
    S2 and S3 promote R1.  Without the sentinel check A fires the cut,
    and after the heal R1's older ledger fires it again."""
    before = World(REPLICA_ALONE).run(ISSUE_28)
    assert before.doubled >= 10, before.row()
    assert before.fired_during_cut == ("M",), before.row()
    after = World(DEFAULT).run(ISSUE_28)
    assert after.doubled == 0 and after.lost == 0, after.row()
    assert after.fired_during_cut == (), after.row()  # no side may: R1 has no replica until the heal
    assert after.caught_up_s is not None and after.caught_up_s > 0, after.row()


class _Sentinel:
    """A sentinel's client: its answer, or unreachable."""

    def __init__(self, state: dict[str, object] | None) -> None:
        self.state = state
        self.asked = 0

    def sentinel_master(self, service_name: str) -> dict[str, object]:
        self.asked += 1
        if self.state is None:
            raise redis.TimeoutError("Timeout reading from socket")
        return self.state


def _naming(port: int, *, sdown: bool = False, others: int = 2) -> dict[str, object]:
    return {"ip": "127.0.0.1", "port": port, "is_master": True, "is_sdown": sdown, "is_odown": False,
            "num-other-sentinels": others}  # fmt: skip


def test_a_write_is_confirmed_once_a_majority_of_the_sentinels_name_its_master_up() -> None:
    master = ("127.0.0.1", 7000)
    cases = [
        ([_naming(7000), _naming(7000), None], True),
        ([None, _naming(7000), _naming(7000)], True),
        ([_naming(7000), None, None], False),  # the issue's side: one sentinel of three
        ([_naming(7000), _naming(7001), _naming(7001)], False),  # the others promoted another
        ([_naming(7000), _naming(7000, sdown=True), _naming(7001)], False),  # one sees it down
        ([_naming(7000, others=4), _naming(7000, others=4), None], False),  # 2 of 5 watching
    ]
    for states, confirmed in cases:
        quorum = SentinelQuorum([_Sentinel(s) for s in states], service="svc")
        why = quorum.confirm(master)
        assert (why == "") is confirmed, (states, why)
    durability = Durability(replicas=1, sentinels=SentinelQuorum([_Sentinel(_naming(7000))] * 3, service="svc"))
    durability.check(Ack(1, master))
    with pytest.raises(Unconfirmed, match="0 of 1 replica"):
        durability.check(Ack(0, master))
    with pytest.raises(Unconfirmed, match="sentinel"):
        durability.check(Ack(1, ("127.0.0.1", 7001)))


def test_sentinels_that_answer_are_asked_first_so_an_unreachable_one_costs_nothing_after_once() -> None:
    away, one, two = _Sentinel(None), _Sentinel(_naming(7000)), _Sentinel(_naming(7000))
    quorum = SentinelQuorum([away, one, two], service="svc")
    for _ in range(3):
        assert quorum.confirm(("127.0.0.1", 7000)) == ""
    assert away.asked == 1


def test_status_says_when_the_sentinels_do_not_confirm_the_writes() -> None:
    """`status` and the dashboard read the `{p}:replicas` record: with the
    sentinels' reason it says so instead of counting replicas."""
    why = "1 of the 2 sentinel(s) needed name 127.0.0.1:7000 as the master and see it up"
    lacking = ReplicasLacking(host="web-1", pid=42, acked=1, required=1, since_ms=0, at_ms=0, sentinels=why)
    line = lacking.describe(12_000)
    assert "not confirmed by the sentinels" in line and why in line and "web-1 pid 42" in line
    plain = ReplicasLacking(host="web-1", pid=42, acked=0, required=1, since_ms=0, at_ms=0)
    assert plain.describe(12_000).startswith("0 of 1 Redis replica(s)")
