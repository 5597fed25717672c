"""A RabbitmqBroker: messages go to a real rabbitmq-server, the lease lives
in a real redis-server.

dramatiq's RabbitmqBroker keeps one pika connection per thread.  The
leader thread enqueues on its own connection, then sleeps until the next
tick without servicing it; with a schedule sparser than the heartbeat
timeout, RabbitMQ drops an idle connection before the next tick.  Every
tick must still be enqueued exactly once and run by a worker, quietly.
"""

from __future__ import annotations

import collections
import datetime as dt
import glob
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.instances import History, Instance, now_ms, wait_for
from tests.support.rabbitmq import RabbitmqServer

#: RabbitMQ drops a connection a few heartbeat intervals after its last
#: frame (2 to 5 s here); the leader thread is idle for 6 s between ticks.
HEARTBEAT_S = 1
STEP_MS = 6000
TICKS = 4
SCHEDULE = "tick_0"


def _runs(record_dir: str) -> list[dict[str, object]]:
    out = []
    for path in glob.glob(os.path.join(record_dir, "runs-*.jsonl")):
        out += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return out


def _tick_ms(tick: str) -> int:
    return int(dt.datetime.fromisoformat(tick).timestamp() * 1000)


def _node_events(log: str, what: str, after_ms: int) -> int:
    """How many lines of the node's log mention ``what`` after ``after_ms``."""
    count = 0
    for line in log.splitlines():
        if what in line:
            stamp = dt.datetime.fromisoformat(line.split(" [", 1)[0].replace(" ", "T"))
            count += stamp.timestamp() * 1000 > after_ms
    return count


@pytest.mark.slow
def test_sparse_schedule_survives_heartbeat_timeouts(
    rabbitmq: RabbitmqServer,
    app_env: dict[str, str],
    record_dir: str,
    history: History,
    instances: Callable[..., Instance],
) -> None:
    env = {
        **app_env,
        "CRON_APP_BROKER": f"{rabbitmq.url}?heartbeat={HEARTBEAT_S}",
        "CRON_APP_CRON": f"*/{STEP_MS // 1000} * * * * *",
    }
    instance = instances(env, processes=2, threads=1)
    start = now_ms()
    # TICKS ticks after the boot, each preceded by an idle gap longer than
    # the heartbeat timeout (the first one by the boot itself).
    end = (start // STEP_MS + TICKS) * STEP_MS
    wanted = set(range((start // STEP_MS + 1) * STEP_MS, end + 1, STEP_MS))

    def ran() -> bool:
        return wanted <= {_tick_ms(str(r["tick"])) for r in _runs(record_dir)}

    wait_for(ran, timeout=(end - start) / 1000 + 15, interval=0.2, what=f"ticks to run ({instance.log_path})")
    log_before_stop = instance.log()
    status = instance.terminate()

    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=end, step_ms=STEP_MS)
    assert verdict.expected == TICKS
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    # Consumed and run: each tick exactly once (no redelivery of a message
    # published twice, none lost between publish and consume).
    runs = collections.Counter(_tick_ms(str(r["tick"])) for r in _runs(record_dir))
    assert {t: runs[t] for t in wanted} == dict.fromkeys(wanted, 1), runs
    assert status == 0

    assert "Traceback" not in log_before_stop, log_before_stop
    loud = re.findall(r"\[(?:WARNING|ERROR|CRITICAL)\] .*", log_before_stop)
    assert not [line for line in loud if not line.startswith("[WARNING]")], loud
    repeated = [line for line, n in collections.Counter(loud).items() if n > 1]
    assert not repeated, loud

    # The scenario really happened: after the first tick RabbitMQ dropped
    # the leader thread's idle connection (about 3 s after its last frame)
    # before later ticks, which were published on new connections.  Every
    # one of them is expected; one slow detection on a loaded machine is
    # tolerated, none is not.
    first = min(wanted) + 1000
    node_log = rabbitmq.node_log()
    assert _node_events(node_log, "missed heartbeats from client", first) >= TICKS - 2, rabbitmq.log_tail()
    assert _node_events(node_log, "accepting AMQP connection", first) >= TICKS - 2, rabbitmq.log_tail()
