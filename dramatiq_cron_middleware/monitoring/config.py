"""The middleware's monitoring arguments as one value, checked once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..errors import is_int, require
from ..schedules.schedule import DEFAULT_TIME_LIMIT
from ..store.connection import redact
from .health import Policy

__all__ = [
    "DEFAULT_ALERT_FOR",
    "DEFAULT_FAILURE_THRESHOLD",
    "DEFAULT_GRACE",
    "DEFAULT_RUN_HISTORY",
    "RUNTIME_SLACK",
    "MonitorConfig",
]

#: How long after its tick a run may take to start (Sentry Crons' check-in
#: margin): a queue that is a minute behind is late.
DEFAULT_GRACE = 60_000
#: A schedule is failing from its first failed run: a nightly job that
#: fails once is worth an alert (Sentry's failure_issue_threshold).
DEFAULT_FAILURE_THRESHOLD = 1
#: How long a change of health must last before it alerts (Alertmanager's
#: ``for:``): a late start that clears within a minute, or a job that
#: dips in and out of ``running_long``, is no page.
DEFAULT_ALERT_FOR = 60_000
#: Runs kept per schedule.
DEFAULT_RUN_HISTORY = 100
#: Added to the actor's time limit when ``max_runtime`` is not given:
#: dramatiq's ``TimeLimit`` stops a run at its limit, checking about once
#: a second, and the failure it raises should win over ``running_long``.
RUNTIME_SLACK = 5_000


@dataclasses.dataclass(frozen=True)
class MonitorConfig:
    """See :class:`~dramatiq_cron_middleware.CronMiddleware` for each."""

    grace: int = DEFAULT_GRACE
    max_runtime: int | None = None
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    run_history: int = DEFAULT_RUN_HISTORY
    on_alert: Callable[[Any], object] | None = None
    alert_webhook: str | None = None
    alert_for: int = DEFAULT_ALERT_FOR

    def __post_init__(self) -> None:
        require("grace", is_int(self.grace, 0), "a non-negative int of ms", self.grace)
        ms = self.max_runtime
        require("max_runtime", ms is None or is_int(ms, 1), "None or a positive int of ms", ms)
        require("failure_threshold", is_int(self.failure_threshold, 1), "a positive int", self.failure_threshold)
        require("alert_for", is_int(self.alert_for, 0), "a non-negative int of ms", self.alert_for)
        require("run_history", is_int(self.run_history, 1), "a positive int", self.run_history)
        require("on_alert", self.on_alert is None or callable(self.on_alert), "None or a callable", self.on_alert)
        url = self.alert_webhook
        parts = urlsplit(url) if isinstance(url, str) else None
        ok = url is None or (parts is not None and parts.scheme in ("http", "https") and bool(parts.netloc))
        require("alert_webhook", ok, "None or an http:// or https:// URL", redact(str(url)))

    def default_policy(self) -> Policy:
        """The thresholds of a schedule nobody here knows (a removed runtime
        schedule whose runs are still reported): these defaults, and the
        default time limit's ``max_runtime``."""
        return Policy(
            grace_ms=self.grace,
            max_runtime_ms=self.max_runtime or DEFAULT_TIME_LIMIT + RUNTIME_SLACK,
            failure_threshold=self.failure_threshold,
            alert_for_ms=self.alert_for,
        )
