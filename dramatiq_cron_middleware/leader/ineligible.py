"""A process that may not lead (``lead=False``, ``DRAMATIQ_CRON_LEAD=0``).

It never competes for the lease: no acquire, renewal or blocking wait.
Once per lease it says it is alive (``{p}:ineligible``, which ``status`` and
the dashboard list as "not eligible") and learns whether any process that
may lead was seen within the candidates' live window; when none was, it
warns once, and once more when one is seen again.
"""

from __future__ import annotations

import logging
import threading

import redis

from ..stop_request import StopRequest
from ..store.connection import redact
from ..store.ineligible import IneligibleSet
from ..store.timing import Timing
from .reports import Episode, credentials_problem

__all__ = ["IneligibleWatch"]


class IneligibleWatch(threading.Thread):
    """The thread an ineligible process runs instead of a leader thread.

    Parameters:
      entry: This process's entry among the processes that may not lead.
      timing: Durations from ``lock_ttl``: it reports every ``lease_ms``
        and counts candidates seen within ``candidate_live_ms``.
      logger: Where the two WARNINGs go.
    """

    def __init__(self, *, entry: IneligibleSet, timing: Timing, logger: logging.Logger) -> None:
        super().__init__(name="dramatiq-cron-ineligible", daemon=True)
        self.entry = entry
        self.timing = timing
        self.logger = logger
        self._stop_request = StopRequest()
        self._nobody = Episode[str]()
        self._unreachable = Episode[str]()

    def run(self) -> None:
        # Eligible processes starting beside this one need a lease or so to
        # show up: judge only once the live window has passed since start.
        waited = 0
        while not self._stop_request.is_set():
            live = self.observe()
            if live is not None and waited >= self.timing.candidate_live_ms:
                self.judge(live)
            waited += self.timing.lease_ms
            self._stop_request.wait(self.timing.lease_ms / 1000)

    def observe(self) -> int | None:
        """Say this process is alive; how many eligible candidates are live
        (None when Redis did not answer, reported once per episode)."""
        try:
            live = self.entry.observe()
        except redis.RedisError as exc:
            credentials = credentials_problem(exc)
            if credentials is not None and self._unreachable.failing("credentials"):
                self.logger.warning("Cron scheduler (not eligible to lead): %s; retrying.", credentials)
            elif credentials is None and self._unreachable.failing(type(exc).__name__):
                self.logger.warning("Cron scheduler (not eligible to lead): cannot reach Redis: %s", redact(f"{exc}"))
            return None
        if self._unreachable.recovered() is not None:
            self.logger.warning("Cron scheduler (not eligible to lead): reaches Redis again.")
        return live

    def judge(self, live: int) -> None:
        """One WARNING when no eligible process is live, one when one is again."""
        if live == 0:
            if self._nobody.failing("none"):
                self.logger.warning(
                    "No process eligible to lead the cron scheduler was seen in the last %d ms: this one runs "
                    "with lead=False (or DRAMATIQ_CRON_LEAD=0), so no schedule fires until an eligible "
                    "process starts.",
                    self.timing.candidate_live_ms,
                )
        elif self._nobody.recovered() is not None:
            self.logger.warning("A process eligible to lead the cron scheduler is live again.")

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread and drop this process from the ineligible set."""
        self._stop_request.set()
        if self.is_alive():
            self.join(timeout)
        self.entry.leave()
        if not self.is_alive():
            self._stop_request.close()
