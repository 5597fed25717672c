"""dramatiq-crontab's decorators over :class:`CronMiddleware`.

Change ``from dramatiq_crontab import cron`` to
``from dramatiq_cron_middleware.compat.crontab import cron`` and the actors
keep their decorators::

    @cron("*/5 * * * *")
    @dramatiq.actor
    def my_task(): ...

The broker must carry a ``CronMiddleware`` (or ``DjangoCronMiddleware``);
``manage.py crontab`` is no longer run: the workers schedule.  As in
dramatiq-crontab, the expression is evaluated in Django's ``TIME_ZONE``
when Django is configured (else in the middleware's ``timezone``).  Unlike
it, numeric days of the week are accepted, with cron's meaning (0 and 7
are Sunday), and ``interval`` ticks at multiples of the interval since the
epoch, not from the scheduler's start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import dramatiq

from ..errors import CronScheduleError
from ..middleware import find_middleware
from ..schedules.schedule import Schedule, of_actor

__all__ = ["cron", "interval"]

A = TypeVar("A", bound=dramatiq.Actor[Any, Any])


def cron(schedule: str) -> Callable[[A], A]:
    """Schedule an actor with a cron expression, as dramatiq-crontab's
    ``@cron(schedule)`` does: put it above ``@dramatiq.actor``.

    Parameters:
      schedule(str): A cron expression (5 fields, or 6 with seconds first;
        ``@hourly``-style aliases too).
    """
    return lambda actor: _schedule(actor, "cron", expression=schedule)


def interval(*, seconds: int) -> Callable[[A], A]:
    """Schedule an actor every ``seconds``, as dramatiq-crontab's
    ``@interval(seconds=...)`` does (at least 1 s).

    Parameters:
      seconds(int): The interval, in seconds.
    """
    return lambda actor: _schedule(actor, "interval", every=seconds * 1000)


def _schedule(actor: A, decorator: str, **fields: Any) -> A:
    if not isinstance(actor, dramatiq.Actor):
        raise CronScheduleError(
            f"@{decorator}(...) decorates a dramatiq actor, got {actor!r}: put it above @dramatiq.actor"
        )
    middleware = find_middleware(actor.broker, needed_by=f"@{decorator}(...) on actor {actor.actor_name!r}")
    with of_actor(actor.actor_name):  # checked before it knew its actor: name it
        schedule = Schedule(**fields, timezone=_django_zone())
    declared = actor.options.get("cron")
    if declared is None:
        actor.options["cron"] = schedule
    else:
        # Stacked decorators: an actor's schedules after the first are named.
        items = list(declared) if isinstance(declared, (list, tuple)) else [declared]
        actor.options["cron"] = [*items, dataclasses.replace(schedule, name=f"{decorator}-{len(items) + 1}")]
    middleware.before_declare_actor(actor.broker, actor)
    return actor


def _django_zone() -> str | None:
    """Django's ``TIME_ZONE`` when Django is configured, as dramatiq-crontab
    uses; None (the middleware's zone) otherwise."""
    try:
        from django.conf import settings
    except ImportError:
        return None
    if not settings.configured:
        return None
    zone = getattr(settings, "TIME_ZONE", None)
    return zone if isinstance(zone, str) else None
