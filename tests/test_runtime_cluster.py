"""Runtime schedules on Redis Cluster: three real masters.

Every runtime key shares the ``{prefix}`` hash tag, so each write and
removal script, each change page and the lexical index live on the one
node owning that slot, and the pipelined bulk add routes there too.
"""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from tests.support.redis_topologies import ClusterGroup


def test_runtime_schedules_are_stored_listed_and_removed_on_a_three_master_cluster(cluster: ClusterGroup) -> None:
    broker = StubBroker()
    cron = CronMiddleware(redis=cluster.url())
    broker.add_middleware(cron)
    dramatiq.actor(lambda tenant=None: None, actor_name="report", broker=broker)

    stored = cron.add("report", Schedule("0 9 * * *", kwargs={"tenant": 1}), name="t1")
    assert stored.revision == 1
    cron.runtime.add_many([("report", "0 * * * *", f"bulk-{n}") for n in range(1200)])
    assert cron.remove("report", "t1") is True

    store = cron.runtime
    version, everything = store.load_all()
    assert version == 1202 and len(everything) == 1200
    assert store.changes_since(1200) == (1202, {"report:bulk-1199": everything["report:bulk-1199"], "report:t1": None})
    page = cron.list(actor="report", limit=1000)
    assert page.total == 1200 and len(page.items) == 1000 and page.cursor is not None
    assert store.count_by_actor() == {"report": 1200}
