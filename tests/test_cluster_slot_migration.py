"""Redis Cluster: the ``{prefix}`` slot in migration.  While a slot is
migrating, its owner serves a multi-key command only if every key it names
exists there (``TRYAGAIN`` otherwise), and the claim script names keys that
usually do not exist (the paused set, a batch's result record): nothing
fires until the migration ends.  That is an expected fault: one WARNING
when it starts and one when it ends, no ERROR, no traceback, and the ticks
it held back are caught up once the slot is stable again.
"""

from __future__ import annotations

import collections
import datetime as dt
import time

from redis.cluster import ClusterNode, RedisCluster

from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_topologies import ClusterGroup

ACTORS = {"job0": "* * * * * *"}
TTL_MS = 6000
MIGRATION_S = 2.0


def _node_ids(cluster: ClusterGroup) -> dict[int, str]:
    return {n.port: str(n.client().execute_command("CLUSTER", "MYID")) for n in cluster.nodes}


def test_a_migrating_prefix_slot_is_one_warning_and_firing_resumes(cluster: ClusterGroup) -> None:
    """Given a leader on a three-master cluster, when the ``{prefix}`` slot
    is set migrating to another master for two seconds and then back to
    stable, then one WARNING names the refusal and one its end, nothing is
    logged at ERROR or with a traceback, and every tick is enqueued once."""
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes])
    slot = int(client.keyslot("{dramatiq-cron}"))
    owner_port = int(client.nodes_manager.get_node_from_slot(slot).port)
    client.close()
    ids = _node_ids(cluster)
    source = next(n for n in cluster.nodes if n.port == owner_port)
    target = next(n for n in cluster.nodes if n.port != owner_port)
    with in_process_app(cluster.url(), ACTORS, lock_ttl=TTL_MS) as app:
        wait_for(lambda: len(app.sent()) >= 2, timeout=20, what="a first round of ticks")
        target.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
        source.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
        time.sleep(MIGRATION_S)  # the fault's own length
        for node in (source, target):
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        mark = len(app.sent())
        wait_for(lambda: len(app.sent()) > mark + 1, timeout=60, what="ticks fired after the migration")
        again = "accepts the cron scheduler's commands again"
        wait_for(lambda: app.warnings(again), timeout=30, what="the recovery WARNING")
        refused = app.warnings("refuses the cron scheduler's commands")
        recovered = app.warnings(again)
        errors = app.errors()
        sent = app.sent()
    assert len(refused) == 1 and "TRYAGAIN" in refused[0], refused
    assert len(recovered) == 1, recovered
    assert not errors, errors[:3]
    counts = collections.Counter(int(dt.datetime.fromisoformat(tick).timestamp() * 1000) for _, tick, _ in sent)
    assert [t for t, n in counts.items() if n > 1] == []
    lost = [t for t in range(min(counts), max(counts) + 1, 1000) if t not in counts]
    assert not lost, f"ticks held back by the migration never caught up: {lost}"
