"""The middleware's arguments as one value, checked once when it is built."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypedDict

from .errors import CronConfigurationError, is_int, require
from .schedules.schedule import DEFAULT_CATCH_UP_WINDOW, CatchUp, parse_timezone
from .store.keys import Keys
from .store.timing import Timing

if TYPE_CHECKING:
    from .monitoring.records import Alert

__all__ = [
    "DEFAULT_CATCH_UP_WINDOW",
    "DEFAULT_LOCK_TTL",
    "ENV_LEAD",
    "ENV_VERSION",
    "OPTIONS",
    "CronConfig",
    "CronOptions",
    "check_options",
]

#: The lease length when ``lock_ttl`` is omitted (Kubernetes' lease).
DEFAULT_LOCK_TTL = 15_000
#: The environment variable read when ``CronMiddleware(app_version=...)`` is omitted.
ENV_VERSION = "DRAMATIQ_CRON_APP_VERSION"
#: The environment variable that, set to ``0``, makes a process ineligible to lead.
ENV_LEAD = "DRAMATIQ_CRON_LEAD"
_LEAD_VALUES = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


class CronOptions(TypedDict, total=False):
    """Every keyword of :class:`~dramatiq_cron_middleware.CronMiddleware`
    but ``redis``, with its type (what each means and its default: the
    class's docstring).  The first twelve are :class:`CronConfig`'s, the
    rest run monitoring's (``monitoring.config.MonitorConfig``)."""

    lock_ttl: int
    catch_up: CatchUp
    catch_up_window: int
    timezone: str
    prefix: str
    history_length: int
    fast_takeover: int | None
    app_version: str | None
    lead: bool
    one_shot_retention: int
    replicas: int | None
    grace: int
    max_runtime: int | None
    failure_threshold: int
    run_history: int
    on_alert: Callable[[Alert], object] | None
    alert_webhook: str | None
    alert_for: int


#: The names of every keyword of ``CronMiddleware`` (``redis`` too).
OPTIONS = frozenset(CronOptions.__optional_keys__) | {"redis"}


def check_options(options: dict[str, Any], *, who: str = "CronMiddleware()") -> None:
    """Refuse an unknown keyword at once, naming it (a ``TypeError``, as
    Python's own for a misspelt argument)."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise TypeError(f"{who} got an unexpected keyword argument {unknown[0]!r}")


@dataclass(frozen=True)
class CronConfig:
    """The middleware's arguments, checked once when it is built: a bad one
    raises :class:`CronConfigurationError` naming the argument and the
    value.  See :class:`CronMiddleware` for what each one means and its
    default."""

    redis: Any = None
    lock_ttl: int = DEFAULT_LOCK_TTL
    catch_up: CatchUp = "each"
    catch_up_window: int = DEFAULT_CATCH_UP_WINDOW
    timezone: str = "UTC"
    prefix: str = "dramatiq-cron"
    history_length: int = 10_000
    fast_takeover: int | None = None
    app_version: str | None = None
    #: Replicas that must hold a claim before it is enqueued (None: decided
    #: per topology when the worker starts; see store/durability.py).
    replicas: int | None = None
    lead: bool = True
    one_shot_retention: int = 86_400_000
    #: Whether this process may lead: ``lead`` and ``DRAMATIQ_CRON_LEAD``
    #: (as it is when the middleware is built) both allow it.
    eligible: bool = field(init=False)
    #: ``app_version``, else ``DRAMATIQ_CRON_APP_VERSION`` (cut to 100
    #: characters) as it is when the middleware is built, else empty.
    version: str = field(init=False)

    def __post_init__(self) -> None:
        require("lock_ttl", is_int(self.lock_ttl, 300), "an int of at least 300 ms", self.lock_ttl)
        require("catch_up", self.catch_up in ("each", "latest", "none"), "'each', 'latest' or 'none'", self.catch_up)
        require("catch_up_window", is_int(self.catch_up_window, 0), "a non-negative int of ms", self.catch_up_window)
        parse_timezone(self.timezone, what="CronMiddleware(timezone=...)")
        prefix = self.prefix
        well_formed = isinstance(prefix, str) and bool(prefix) and not any(c in prefix for c in "{}")
        require("prefix", well_formed, "a non-empty string without braces", prefix)
        require("history_length", is_int(self.history_length, 1), "a positive int", self.history_length)
        ms = self.fast_takeover
        require("fast_takeover", ms is None or is_int(ms, 50), "None or an int of at least 50 ms", ms)
        require("replicas", self.replicas is None or is_int(self.replicas, 0), "None or an int >= 0", self.replicas)
        version = self.app_version
        well_formed = version is None or (isinstance(version, str) and "|" not in version and len(version) <= 100)
        require("app_version", well_formed, "a string of at most 100 characters without '|'", version)
        resolved = version if version is not None else os.environ.get(ENV_VERSION, "")[:100]
        object.__setattr__(self, "version", resolved)  # a derived field of a frozen value
        require("lead", isinstance(self.lead, bool), "True or False", self.lead)
        retention = self.one_shot_retention
        require("one_shot_retention", is_int(retention, 0), "a non-negative int of ms", retention)
        text = os.environ.get(ENV_LEAD, "1").strip().lower() or "1"
        if text not in _LEAD_VALUES:
            raise CronConfigurationError(
                f"CronMiddleware: {ENV_LEAD} must be 0 or 1 (or true/false, yes/no), got {os.environ[ENV_LEAD]!r}"
            )
        object.__setattr__(self, "eligible", self.lead and _LEAD_VALUES[text])

    @cached_property
    def keys(self) -> Keys:
        """Every key of the scheduler in Redis, under ``prefix``."""
        return Keys(self.prefix)

    @cached_property
    def timing(self) -> Timing:
        """Every duration, derived once from ``lock_ttl`` (and the fast
        takeover's interval and a one-shot's retention, as given)."""
        return Timing.for_lease(
            self.lock_ttl, fast_takeover_ms=self.fast_takeover, one_shot_retention_ms=self.one_shot_retention
        )
