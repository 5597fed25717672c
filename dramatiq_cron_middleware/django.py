"""Django: the middleware configured from ``settings.DRAMATIQ_CRON``.

django_dramatiq builds the broker's middleware from dotted paths in
``DRAMATIQ_BROKER["MIDDLEWARE"]`` and calls each class with no arguments,
so this subclass takes its arguments from a settings dict instead::

    DRAMATIQ_CRON = {"redis": "redis://localhost:6379/0", "lock_ttl": 15000}
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.redis.RedisBroker",
        "OPTIONS": {"url": "redis://localhost:6379/0"},
        "MIDDLEWARE": [..., "dramatiq_cron_middleware.django.DjangoCronMiddleware"],
    }

The keys are :class:`~dramatiq_cron_middleware.CronMiddleware`'s keyword
arguments.  Without ``DRAMATIQ_CRON`` (or without its ``redis`` key) the
usual fallbacks apply: ``DRAMATIQ_CRON_REDIS_URL``, then a RedisBroker's
own client.  Importing this module does not import Django; the settings are
read when the middleware is built, which django_dramatiq does once the
settings are configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import OPTIONS
from .errors import CronConfigurationError
from .middleware import CronMiddleware

__all__ = ["DjangoCronMiddleware", "SETTING"]

#: The Django setting holding the middleware's keyword arguments.
SETTING = "DRAMATIQ_CRON"


class DjangoCronMiddleware(CronMiddleware):
    """:class:`~dramatiq_cron_middleware.CronMiddleware` whose arguments
    come from the Django setting ``DRAMATIQ_CRON`` (a dict of its keyword
    arguments); keyword arguments given here override the setting.

    Parameters:
      overrides: Any ``CronMiddleware`` keyword argument.  Defaults to none,
        which is how django_dramatiq builds middleware from a dotted path.
    """

    def __init__(self, **overrides: Any) -> None:
        from django.conf import settings  # only when used, so the package never needs Django

        configured = getattr(settings, SETTING, None) or {}
        if not isinstance(configured, Mapping):
            raise CronConfigurationError(
                f"settings.{SETTING} must be a dict of CronMiddleware arguments, got {type(configured).__name__}"
            )
        unknown = sorted(set(configured) - OPTIONS)
        if unknown:
            raise CronConfigurationError(f"settings.{SETTING} has unknown keys {unknown}; allowed: {sorted(OPTIONS)}")
        super().__init__(**{**configured, **overrides})
