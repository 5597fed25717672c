"""Data loss is told apart from a failover: after an eviction or a flush the
new leader fires at once (no old master can still accept an old leader's
writes), reports the loss once, and records it in the history."""

from __future__ import annotations

import pytest

from dramatiq_cron_middleware.store.server_identity import DataLoss, ServerIdentity, classify_loss
from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def test_a_flushed_redis_is_data_loss_not_a_failover(redis_server: RedisServer) -> None:
    """Given a leader firing every second with a 3 s lease, when Redis is
    flushed again and again (as an allkeys eviction policy under pressure
    does to the epoch counter and the ledger), then no first fire is
    delayed as after a failover, the loss is reported once (not per
    flush), it is recorded in the history, and ticks keep firing between
    the flushes without a duplicate."""
    client = redis_server.client()
    with in_process_app(redis_server.url, {"job": "* * * * * *"}, lock_ttl=3000) as app:
        wait_for(lambda: len(app.sent()) >= 1, timeout=60, what="a first fire")
        for _ in range(4):
            client.flushall()
            mark = len(app.sent())
            wait_for(lambda mark=mark: len(app.sent()) > mark, timeout=30, what="a fire after the flush")
        assert not app.warnings("failover"), app.warnings()
        assert len(app.warnings("was gone")) <= 2, app.warnings()  # the epoch counter's and the ledger's
        assert len(app.warnings("Lost cron leadership")) <= 1, app.warnings()
        outcomes = [fields["outcome"] for _, fields in client.xrange(app.keys.history)]
        assert "ledger_lost" in outcomes
        assert app.duplicates() == []


A = ServerIdentity(run_id="a" * 40, role="master", inherited_replid="")


@pytest.mark.parametrize(
    ("after", "loss"),
    [
        (A, DataLoss.EVICTED_OR_FLUSHED),
        (ServerIdentity(run_id="b" * 40, role="master", inherited_replid=""), DataLoss.RESTARTED),
        (ServerIdentity(run_id="c" * 40, role="master", inherited_replid="d" * 40), DataLoss.FAILOVER),
        (ServerIdentity(run_id="a" * 40, role="slave", inherited_replid=""), DataLoss.FAILOVER),
        (None, DataLoss.UNKNOWN),
    ],
    ids=["same-server", "restart", "promoted-replica", "demoted", "info-refused"],
)
def test_a_loss_is_classified_by_the_server_identity(after: ServerIdentity | None, loss: DataLoss) -> None:
    assert classify_loss(A, after) == loss
