"""Exceptions raised to the user of dramatiq-cron-middleware."""

from __future__ import annotations

from typing import TypeGuard

import redis
from dramatiq.middleware import MiddlewareError

__all__ = [
    "CronBootError",
    "CronConfigurationError",
    "CronError",
    "CronScheduleError",
    "CronUnavailableError",
    "is_int",
    "require",
    "shown",
]


class CronError(MiddlewareError):
    """Base class of every error this package raises.

    It derives from :class:`dramatiq.middleware.MiddlewareError` because
    dramatiq logs and swallows any other exception raised from a
    middleware hook: a bad schedule must stop the import, not scroll by.
    """


class CronScheduleError(CronError, ValueError):
    """A ``cron`` actor option or :class:`~dramatiq_cron_middleware.Schedule`
    is invalid.  Raised when the actor is declared, naming the actor and
    the offending value."""


class CronConfigurationError(CronError, ValueError):
    """The middleware itself is misconfigured (for example no Redis is
    configured, or an argument is out of range)."""


class CronUnavailableError(CronError, redis.ConnectionError):
    """Redis could not be reached, or did not answer in time, while reading
    or writing runtime schedules.

    Every write is one atomic script, so a write that raised this either
    took effect entirely or not at all (a lost reply cannot tell which:
    read the schedule back to know).  It is also a
    ``redis.ConnectionError``, so code that already handles an unreachable
    Redis handles it too."""


class CronBootError(CronConfigurationError, SystemExit):
    """The scheduler cannot start in a worker process (no Redis configured,
    a malformed URL): a :class:`CronConfigurationError`, logged once as one
    ERROR by the middleware, that is also a ``SystemExit`` (status 2), so a
    ``dramatiq`` worker process stops without printing a traceback (it is
    logged at DEBUG), having asked dramatiq's main process to stop (so that
    it logs no CRITICAL); in-process code catches it as the configuration
    error it is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = 2


#: How many characters of a value an error message echoes.
SHOWN_LIMIT = 100


def shown(value: object, limit: int = SHOWN_LIMIT) -> str:
    """``repr(value)`` as an error message echoes it: cut to ``limit``
    characters, saying how long it was (a 10 kB name is not echoed whole)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def is_int(value: object, minimum: int) -> TypeGuard[int]:
    """Whether ``value`` is an int (not a bool) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def require(argument: str, ok: bool, wanted: str, value: object) -> None:
    """Refuse a middleware argument unless ``ok``: one wording for every
    one of them (``CronConfig``, ``MonitorConfig``)."""
    if not ok:
        raise CronConfigurationError(f"CronMiddleware: {argument} must be {wanted}, got {value!r}")
