"""An app with a dashboard, for the in-process dashboard tests: a
RedisBroker on the test's redis-server, a few declared actors, and a
:class:`~tests.support.wsgi.Browser` on its :class:`CronDashboard`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.web import CronDashboard
from tests.support.redis_server import RedisServer
from tests.support.wsgi import Browser

#: A name that must come out escaped wherever a page shows it.
EVIL = "<img src=x onerror=alert(1)>"


@dataclass
class DashboardApp:
    server: RedisServer
    broker: RedisBroker
    middleware: CronMiddleware

    def dashboard(self, **kwargs: Any) -> Browser:
        """A browser on a dashboard of this app (unauthenticated unless
        told otherwise)."""
        guarded = {"auth", "token", "read_only"} & set(kwargs)
        return Browser(CronDashboard(self.broker, **({} if guarded else {"unauthenticated": True}), **kwargs))


def dashboard_app(server: RedisServer, *, actors: int = 0) -> DashboardApp:
    """Declares ``every_second`` (cron every second), ``report`` (03:00 on
    Mondays, kwargs that need escaping) and ``actors`` more every 5 minutes."""
    broker = RedisBroker(url=f"redis://127.0.0.1:{server.port}/1")
    middleware = CronMiddleware(redis=server.url, lock_ttl=1000)
    broker.add_middleware(middleware)
    dramatiq.actor(lambda x=None, who=None: None, actor_name="every_second", broker=broker, cron="* * * * * *")
    dramatiq.actor(
        lambda x=None, who=None: None,
        actor_name="report",
        broker=broker,
        cron=Schedule("0 3 * * 1", name="weekly", kwargs={"x": EVIL}),
    )
    for i in range(actors):
        dramatiq.actor(lambda: None, actor_name=f"bulk_{i:04d}", broker=broker, cron="*/5 * * * *")
    return DashboardApp(server=server, broker=broker, middleware=middleware)


def csrf_of(page: str) -> str:
    """The CSRF value of the first form on a page."""
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


def row_ids(page: str) -> list[str]:
    """The schedule ids of a page's rows, in order."""
    import html

    return [html.unescape(s) for s in re.findall(r'<tr data-schedule="([^"]+)"', page)]
