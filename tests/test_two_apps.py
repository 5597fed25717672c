"""Two apps on one Redis and one prefix (issue 30.9): the second app's
schedules never fire, because the apps compete for one lease.  The leader
says so at once, naming both schedule sets and the fix, and `status` and
`check` (exit non-zero) say the same."""

from __future__ import annotations

import json

from tests.support.command import dramatiq_cron
from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer

FIX = "give each app its own CronMiddleware(prefix=...)"


def test_two_apps_on_one_prefix_are_named_with_the_fix_by_the_leader_status_and_check(
    redis_server: RedisServer,
) -> None:
    """Given two apps with different schedules (no app_version) on one
    Redis and the default prefix, When both run, Then the leader logs one
    WARNING naming both sets and the fix; `status` names both sets (which
    leads) and the fix; `check` says the same and exits non-zero, also in
    its JSON."""
    env = {"DRAMATIQ_CRON_REDIS_URL": redis_server.url, "CRON_APP_CRON": "0 3 * * *"}
    with (
        in_process_app(redis_server.url, {"billing_run": "* * * * * *"}) as billing,
        in_process_app(redis_server.url, {"mail_digest": "* * * * * *"}) as mail,
    ):
        leader = wait_for(
            lambda: billing if billing.leader.leading else mail if mail.leader.leading else None,
            timeout=30,
            what="a leader",
        )
        warned = wait_for(lambda: leader.warnings("different schedule sets"), timeout=30, what="the WARNING")
        assert "two apps may share the prefix 'dramatiq-cron'" in warned[0] and FIX in warned[0], warned
        assert "billing_run" in warned[0] and "mail_digest" in warned[0], warned

        def both_listed() -> str | None:
            out = dramatiq_cron(env, "status", "tests.apps.cronapp").stdout
            return out if "billing_run" in out and "mail_digest" in out else None

        status = wait_for(both_listed, timeout=30, interval=0.5, what="status naming both sets")
        assert "two apps may share the prefix 'dramatiq-cron'" in status and FIX in status, status
        assert "(the leader)" in status, status

        checked = dramatiq_cron(env, "check", "tests.apps.cronapp")
        assert checked.returncode >= 1, checked.stdout
        assert FIX in checked.stdout and "billing_run" in checked.stdout and "mail_digest" in checked.stdout
        as_json = json.loads(dramatiq_cron(env, "check", "tests.apps.cronapp", "--json").stdout)
        assert as_json["mixed_schedule_sets"] is True
        assert sorted(s for entry in as_json["schedule_sets"] for s in entry["schedules"]) == [
            "billing_run",
            "mail_digest",
        ]
        assert len(leader.warnings("different schedule sets")) == 1
