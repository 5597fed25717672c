"""overlap="skip" with real dramatiq processes and a real Redis: ticks
that fall while the previous message runs are recorded as skipped, the
next tick after the run fires, and a run killed mid-way blocks the
schedule only until the mark's TTL."""

from __future__ import annotations

import glob
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.instances import Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer

SID = "slow_job/slow"
MARK = "{dramatiq-cron}:running:" + SID


def outcomes(client: Any, since_ms: int = 0) -> list[tuple[int, str]]:
    """(tick, outcome) of every history entry of the schedule."""
    out = []
    for _, fields in client.xrange("{dramatiq-cron}:history"):
        if fields.get("schedule") == SID and int(fields["tick"]) > since_ms:
            out.append((int(fields["tick"]), fields["outcome"]))
    return out


def runs(record_dir: str) -> list[dict[str, Any]]:
    out = []
    for path in glob.glob(os.path.join(record_dir, "runs-*.jsonl")):
        out += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return sorted(out, key=lambda r: r["at"])


def test_ticks_during_a_run_are_recorded_skipped_and_the_next_fires_after_it(
    redis_server: RedisServer, record_dir: str, instances: Callable[..., Instance]
) -> None:
    """Given a per-second schedule with overlap="skip" whose run takes 2.5 s,
    when it runs for a while,
    then ticks falling during a run are recorded as skipped, never two runs
    overlap, and a tick after each run fires again."""
    env = {
        "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
        "CRON_APP_BROKER": redis_server.url,
        "CRON_APP_RECORD": record_dir,
        # Long enough that only the worker clearing the mark explains a
        # fire within seconds of a run's end.
        "CRON_APP_OVERLAP_TTL": "20000",
    }
    instance = instances(env, app="tests.apps.overlapapp", threads=2)
    client = redis_server.client()
    wait_for(lambda: sum(1 for r in runs(record_dir) if r["event"] == "end") >= 2, timeout=30, what="two finished runs")
    instance.terminate()
    history = outcomes(client)
    fired = [t for t, o in history if o in ("fired", "caught_up")]
    skipped = [t for t, o in history if o == "skipped"]
    assert len(fired) >= 2 and len(skipped) >= 2, history
    started = [r for r in runs(record_dir) if r["event"] == "start"]
    # Skipped ticks were not enqueued: every run is a fired tick.
    assert len(started) <= len(fired)
    # Never two runs at once, though the worker has two threads.
    events = runs(record_dir)
    depth = 0
    for e in events:
        depth += 1 if e["event"] == "start" else -1
        assert depth <= 1, events
    # Between two fired ticks lie skipped ones (the run took 2.5 periods).
    assert any(a < s < b for a, b in itertools.pairwise(fired) for s in skipped), history
    # The finished run cleared its mark: the next tick fired well before
    # the mark's 20 s TTL would have let it.
    assert fired[1] - fired[0] < 10_000, history


def test_a_run_killed_mid_way_blocks_the_schedule_only_until_the_ttl(
    redis_server: RedisServer, record_dir: str, instances: Callable[..., Instance]
) -> None:
    """Given a run in progress (its running mark set, TTL 4 s),
    when its worker is killed with SIGKILL,
    then a new instance records ticks as skipped while the mark lives and
    fires again once it expired."""
    env = {
        "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
        "CRON_APP_BROKER": redis_server.url,
        "CRON_APP_RECORD": record_dir,
        "CRON_APP_SLEEP_MS": "30000",
        "CRON_APP_OVERLAP_TTL": "4000",
    }
    first = instances(env, app="tests.apps.overlapapp")
    client = redis_server.client()
    wait_for(lambda: any(r["event"] == "start" for r in runs(record_dir)), timeout=30, what="a run to start")
    assert client.get(MARK) is not None
    first.kill9()
    killed_at = now_ms()
    second = instances({**env, "CRON_APP_SLEEP_MS": "100"}, app="tests.apps.overlapapp")
    wait_for(
        lambda: any(o == "fired" and t > killed_at for t, o in outcomes(client)),
        timeout=30,
        what="a tick fired after the killed run's mark expired",
    )
    second.terminate()
    after = outcomes(client, killed_at)
    first_fire = min(t for t, o in after if o == "fired")
    # Blocked (recorded as skipped, not lost silently) until the TTL ran out.
    assert any(o == "skipped" for t, o in after if t < first_fire), after
