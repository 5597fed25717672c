"""Django: a minimal project (tests/django_project) with django_dramatiq,
the cron middleware named by dotted path and configured by
``settings.DRAMATIQ_CRON``, run for real with ``manage.py rundramatiq``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.support.components import require_module
from tests.support.instances import ROOT, History, Instance, now_ms, wait_for
from tests.support.redis_server import RedisServer

PROJECT = ROOT / "tests" / "django_project"
SCHEDULE = "heartbeat"


def _require_django() -> None:
    require_module("django", install="pip install django")
    require_module("django_dramatiq", install="pip install django-dramatiq")


def test_rundramatiq_fires_each_tick_once_with_settings_from_dramatiq_cron(
    redis_server: RedisServer, instances: Callable[..., Instance], history: History, record_dir: str
) -> None:
    _require_django()
    env = {"CRON_DJANGO_REDIS_URL": redis_server.url, "CRON_APP_RECORD": record_dir}
    command = [sys.executable, str(PROJECT / "manage.py"), "rundramatiq", "--path", str(PROJECT)]
    instance = instances(env, command=[*command, "--processes", "2", "--threads", "1"], processes=2)
    start = history.first_tick(SCHEDULE)
    wait_for(lambda: len([t for t in history.ticks(SCHEDULE) if t > start]) >= 3, timeout=20, what="three ticks")

    # The lease lives under the prefix and TTL the settings gave.
    lease = redis_server.client().hgetall("{django-cron}:lease")
    assert lease["ttl"] == "2000"
    assert int(lease["pid"]) in instance.worker_pids()
    verdict = history.judge(schedules=[SCHEDULE], start_ms=start, end_ms=now_ms() - 1500)
    assert not verdict.duplicates and not verdict.losses, verdict.summary()
    assert instance.terminate() == 0
    assert "Released cron leadership" in instance.log()
    assert "Traceback" not in instance.log(), instance.log()[-3000:]


def test_an_unknown_dramatiq_cron_key_is_one_clear_error() -> None:
    _require_django()
    code = (
        "import django; from django.conf import settings;"
        "settings.configure(DRAMATIQ_CRON={'redis': 'redis://127.0.0.1:1/0', 'lock_tll': 2000});"
        "from dramatiq_cron_middleware.django import DjangoCronMiddleware;"
        "DjangoCronMiddleware()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode != 0
    assert "settings.DRAMATIQ_CRON has unknown keys ['lock_tll']" in done.stderr


def test_the_dashboard_include_is_guarded_by_the_staff_login_and_works_behind_it(redis_server: RedisServer) -> None:
    """Given the project's ``path("cron/", include(...web.django))``, When
    an anonymous visitor, a logged-in non-staff user and a staff user ask
    for it, Then only the staff user gets the pages, whose links stay under
    the include, and pausing works with the dashboard's own CSRF token."""
    _require_django()
    pytest.importorskip("jinja2")
    done = subprocess.run(
        [sys.executable, str(PROJECT / "dashboard_check.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CRON_DJANGO_REDIS_URL": redis_server.url},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dashboard ok" in done.stdout
    assert redis_server.client().smembers("{django-cron}:paused") == set()


def test_dramatiq_cron_runs_against_the_project_with_django_settings_module_alone(redis_server: RedisServer) -> None:
    """Given the project's settings in DJANGO_SETTINGS_MODULE and no module
    of our own, When `dramatiq-cron list` and `pause` name a tasks module
    (or django_dramatiq itself), Then the command sets Django up first, as
    rundramatiq does, and sees the project's cron actor on the configured
    prefix; a settings module that cannot be imported is one line, exit 2."""
    _require_django()
    from tests.support.command import dramatiq_cron

    env = {"DJANGO_SETTINGS_MODULE": "cronsite.settings", "CRON_DJANGO_REDIS_URL": redis_server.url}
    for app in ("cronjobs.tasks", "django_dramatiq"):
        listed = dramatiq_cron(env, "list", app, "--path", str(PROJECT), "--json")
        assert listed.returncode == 0, listed.stderr
        assert [s["id"] for s in json.loads(listed.stdout)["schedules"]] == [SCHEDULE]
    paused = dramatiq_cron(env, "pause", "django_dramatiq", SCHEDULE, "--path", str(PROJECT))
    assert paused.returncode == 0, paused.stderr
    assert redis_server.client().smembers("{django-cron}:paused") == {SCHEDULE}

    broken = dramatiq_cron({**env, "DJANGO_SETTINGS_MODULE": "nosuch.settings"}, "list", "django_dramatiq")
    assert broken.returncode == 2
    assert broken.stderr.splitlines() == [
        "dramatiq-cron: error: cannot set up Django (DJANGO_SETTINGS_MODULE='nosuch.settings'): "
        "ModuleNotFoundError: No module named 'nosuch'"
    ]
