"""periodiq's middleware and ``periodic=`` option over :class:`CronMiddleware`.

Change ``from periodiq import PeriodiqMiddleware, cron`` to
``from dramatiq_cron_middleware.compat.periodiq import PeriodiqMiddleware, cron``
and the app keeps its actors::

    broker.add_middleware(PeriodiqMiddleware(skip_delay=30))

    @dramatiq.actor(periodic=cron("0 * * * *"))
    def hourly(): ...

The ``periodiq`` process is no longer run: the workers schedule.  Kept from
periodiq: ticks missed while nobody scheduled are not sent afterwards
(``catch_up="none"``), and a message that waited more than ``skip_delay``
seconds is skipped (``max_age``, through dramatiq's ``AgeLimit``).  Changed:
expressions are evaluated in ``timezone`` (UTC by default), not in the
host's local time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import dramatiq

from ..errors import CronConfigurationError, CronScheduleError, is_int
from ..middleware import CronMiddleware
from ..schedules.schedule import Schedule

__all__ = ["PeriodiqMiddleware", "cron"]


def cron(spec: str) -> Schedule:
    """periodiq's ``cron(spec)``: an expression (``@hourly``, ``@daily``...
    aliases too) as the value of ``periodic=``."""
    return Schedule(spec)


class PeriodiqMiddleware(CronMiddleware):
    """:class:`CronMiddleware` reading periodiq's ``periodic=`` actor option
    (``cron=`` works too), with periodiq's behaviour by default.

    Parameters:
      skip_delay(int): Seconds after its tick past which a message is
        skipped instead of run, as in periodiq.  Defaults to 30.  None
        keeps messages however late.
      options: Any ``CronMiddleware`` keyword argument.  ``catch_up``
        defaults to ``"none"`` here (periodiq never sends a missed tick);
        pass ``catch_up="each"`` to have missed ticks caught up.
    """

    def __init__(self, skip_delay: int | None = 30, **options: Any) -> None:
        if skip_delay is not None and not is_int(skip_delay, 1):
            raise CronConfigurationError(
                f"PeriodiqMiddleware: skip_delay must be a positive number of seconds, got {skip_delay!r}"
            )
        options.setdefault("catch_up", "none")
        super().__init__(**options)
        self.skip_delay = skip_delay

    @property
    def actor_options(self) -> set[str]:
        """``cron`` and periodiq's ``periodic``."""
        return {"cron", "periodic"}

    def schedule_option(self, actor: dramatiq.Actor[Any, Any]) -> object:
        """``periodic=`` as a schedule with periodiq's ``skip_delay``; else ``cron=``."""
        periodic = actor.options.get("periodic")
        if periodic is None:
            return super().schedule_option(actor)
        if actor.options.get("cron") is not None:
            raise CronScheduleError(f"actor {actor.actor_name!r}: give periodic= or cron=, not both")
        if isinstance(periodic, str):
            periodic = Schedule(periodic)
        if not isinstance(periodic, Schedule):
            raise CronScheduleError(
                f"actor {actor.actor_name!r}: periodic= must be cron('...') or an expression, got {periodic!r}"
            )
        if self.skip_delay is not None and periodic.max_age is None:
            periodic = dataclasses.replace(periodic, max_age=self.skip_delay * 1000)
        return periodic
