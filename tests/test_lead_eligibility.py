"""``lead=False`` (``DRAMATIQ_CRON_LEAD=0``) under real ``dramatiq``
processes and a real Redis: ineligible processes never touch the lease,
are shown as not eligible, and warn once when nobody may lead."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.support.instances import Instance, wait_for
from tests.support.redis_server import RedisServer
from tests.test_cli import APP, app_env, cli

KEYS = "{dramatiq-cron}"
NOBODY = "No process eligible to lead the cron scheduler"


def test_with_lead_false_everywhere_but_one_that_one_leads_and_after_it_dies_nobody_does(
    redis_server: RedisServer, record_dir: str, instances: Callable[..., Instance]
) -> None:
    """Given one eligible instance and two with DRAMATIQ_CRON_LEAD=0, Then
    the eligible one leads and status lists the two as not eligible; When
    it is killed with SIGKILL, Then nobody takes the lease, each
    ineligible process logs one WARNING (not one per lease), status warns
    and exits 1, And the ineligible processes never appeared among the
    candidates or bumped the epoch."""
    env = {**app_env(redis_server, record_dir), "CRON_APP_TTL": "1000"}
    client = redis_server.client()
    eligible = instances(env)
    others = [instances({**env, "DRAMATIQ_CRON_LEAD": "0"}) for _ in range(2)]
    ineligible_pids = {pid for o in others for pid in o.worker_pids()}
    wait_for(lambda: client.hget(f"{KEYS}:lease", "pid"), timeout=20, what="a leader")
    assert int(client.hget(f"{KEYS}:lease", "pid") or 0) in eligible.worker_pids()
    wait_for(lambda: client.zcard(f"{KEYS}:ineligible") == 2, timeout=60, what="both ineligible seen")
    status = json.loads(cli(env, "status", APP, "--json").stdout)
    assert sorted(p["pid"] for p in status["not_eligible"]) == sorted(ineligible_pids)
    assert status["no_eligible_process"] is False
    epoch = client.get(f"{KEYS}:epoch")

    eligible.kill9()
    for other in others:
        wait_for(lambda o=other: NOBODY in o.log(), timeout=20, what="the no-eligible WARNING")  # type: ignore[misc]
    # Two more checks by each ineligible process (they report every lease):
    # the WARNING must not repeat.
    warned_ms = int(client.time()[0]) * 1000
    wait_for(
        lambda: all(
            score >= warned_ms + 4000 for _, score in client.zrange(f"{KEYS}:ineligible", 0, -1, withscores=True)
        ),
        timeout=60,
        what="two more checks by each ineligible process",
    )
    assert [o.log().count(NOBODY) for o in others] == [1, 1]
    assert all("WARNING" in line for o in others for line in o.log().splitlines() if NOBODY in line)

    result = cli(env, "status", APP, "--json")
    assert result.returncode == 1
    status = json.loads(result.stdout)
    assert status["no_eligible_process"] is True and status["leader"] is None
    assert "No process eligible to lead" in cli(env, "status", APP).stdout
    members = [str(m) for m in client.zrange(f"{KEYS}:candidates", 0, -1)]
    assert not [m for m in members if int(m.split("|")[-2]) in ineligible_pids]
    assert client.get(f"{KEYS}:epoch") == epoch and not client.exists(f"{KEYS}:lease")
    assert not any("Acquired cron leadership" in o.log() for o in others)


def test_a_bad_dramatiq_cron_lead_is_refused_with_one_line_naming_it(
    redis_server: RedisServer, record_dir: str
) -> None:
    result = cli({**app_env(redis_server, record_dir), "DRAMATIQ_CRON_LEAD": "maybe"}, "status", APP)
    assert result.returncode == 2
    assert "DRAMATIQ_CRON_LEAD must be 0 or 1" in result.stderr and "'maybe'" in result.stderr
    assert "Traceback" not in result.stderr
