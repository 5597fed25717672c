"""One WARNING per finding, however often it is seen again."""

from __future__ import annotations

import logging

__all__ = ["OnceReports"]


class OnceReports:
    """Logs each finding (a corrupt key, an unusable entry, an undeclared
    actor...) once, the first time it is seen: the leader sees the same
    ones at every turn."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._seen: set[str] = set()

    def __call__(self, what: str, message: str, *args: object) -> None:
        """WARN ``message % args`` unless ``what`` was reported before."""
        if what in self._seen:
            return
        self._seen.add(what)
        self.logger.warning("Cron scheduler: " + message + ".", *args)
