"""The leader's faults, reported once per episode, never once per retry."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from ..store.abc import LeaseStore
from ..store.connection import ENV_URL, redact, scripting_missing
from ..store.durability import Unconfirmed
from ..store.timing import Timing
from .firing import LeaderObserver
from .reports import Episode, credentials_problem

__all__ = ["Faults"]

_FAULTS = (redis.ConnectionError, redis.TimeoutError, OSError)


class Faults:
    """One WARNING when the leader loop starts failing (or fails another
    way), one when it works again: Redis unreachable, refusing, refusing
    the credentials, unable to run scripts, writes not confirmed by
    replicas, or a bug.

    Parameters:
      lease: Where the replicas' shortfall is shown to operators.
      timing: Every duration (the retry interval is named in the lines).
      logger: Where the reports go.
      observer: Told when replicas stop and resume acknowledging.
      monotonic: The leader's clock.
    """

    def __init__(
        self,
        *,
        lease: LeaseStore,
        timing: Timing,
        logger: logging.Logger,
        observer: LeaderObserver,
        monotonic: Callable[[], float],
    ) -> None:
        self.lease = lease
        self.timing = timing
        self.logger = logger
        self.observer = observer
        self.monotonic = monotonic
        self._fault: Episode[str] = Episode()
        #: Writes too few replicas acknowledged: reported apart from the
        #: faults above.  A turn that completes after one made a confirmed
        #: write (the renewal retried, the settle, or a follower's
        #: acquisition, which always writes), so it ends the episode.
        self._unconfirmed: Episode[str] = Episode()
        # Until a first turn completes, and for one lease after the start:
        # a fresh replica's initial sync (Redis waits repl-diskless-sync-delay,
        # 5 s by default, before sending it) is the expected cause of writes
        # not acknowledged yet, said at INFO; a WARNING only once it lasts.
        self._booting_until: float | None = monotonic() + timing.lease_ms / 1000

    def healthy(self) -> None:
        """A turn that reached Redis completed: end the episodes."""
        self._booting_until = None
        unconfirmed = self._unconfirmed.recovered()
        if unconfirmed is not None:
            if unconfirmed == "boot":
                self.logger.info("The cron scheduler's first writes are confirmed durable: it fires from now.")
            else:
                self.logger.warning("The cron scheduler's writes are confirmed durable again.")
            self.observer.replicas_confirmed(confirmed=True)
            self.lease.report_replicas(None)
        fault = self._fault.recovered()
        if fault is not None:
            if fault == "unreachable":
                self.logger.warning("Cron scheduler reaches Redis again.")
            elif fault.startswith("refused:"):
                self.logger.warning("Redis accepts the cron scheduler's commands again.")
            elif fault.startswith("credentials:"):
                self.logger.warning("Redis accepts the cron scheduler's password again.")
            else:
                self.logger.warning("Cron leader loop works again.")

    def unconfirmed(self, unconfirmed: Unconfirmed) -> None:
        """Redis answered, but too few replicas acknowledged."""
        try:
            self.lease.report_replicas(unconfirmed)  # refreshed at each retry, for operators
        except (*_FAULTS, redis.RedisError):
            pass  # a replica answered, or Redis went away: the WARNING below still says it
        booting = self._booting_until is not None and self.monotonic() < self._booting_until
        if booting and self._unconfirmed.failing("boot"):
            self.logger.info(
                "Waiting for the cron scheduler's first writes to be confirmed durable (%s), as after a "
                "replica's initial sync: nothing fires until they are; a WARNING if it lasts past %d ms.",
                unconfirmed,
                self.timing.lease_ms,
            )
            self.observer.replicas_confirmed(confirmed=False)
        elif not booting and self._unconfirmed.failing("unconfirmed"):
            self.logger.warning(
                "The cron scheduler's writes are not confirmed durable (%s): nothing fires until they are (a "
                "claim made meanwhile is settled then); a leader steps down after %d ms; retrying every %d ms.",
                unconfirmed,
                int(self.timing.fire_deadline * 1000),
                int(self.timing.retry_interval * 1000),
            )
            self.observer.replicas_confirmed(confirmed=False)

    def fault(self, exc: BaseException, refused: str | None) -> None:
        """``refused``: "" for an unreachable Redis, the refusal for a
        reachable one that refuses (one WARNING per kind), None for
        anything else (a bug: ERROR with traceback)."""
        credentials = credentials_problem(exc) if refused == "" else None
        if refused is None:
            key = f"{type(exc).__name__}: {exc}"
        elif credentials is not None:
            key = f"credentials:{credentials}"
        else:
            key = f"refused:{refused.split(':')[0]}" if refused else "unreachable"
        no_scripting = scripting_missing(exc)
        if self._fault.failing(key):
            if credentials is not None:
                self.logger.warning(
                    "%s: nothing is scheduled by this process until Redis accepts it; retrying every %d ms "
                    "(fix redis= or %s and restart the workers).",
                    credentials,
                    int(self.timing.retry_interval * 1000),
                    ENV_URL,
                )
            elif refused is None and no_scripting is not None:
                # A setting of the server, not a bug: no traceback.
                self.logger.error(
                    "Redis cannot run the cron scheduler's Lua scripts (%s): the scheduler needs EVAL, EVALSHA and "
                    "SCRIPT (Redis 6.2 or later, or Valkey with its Lua scripting engine loaded; were they renamed "
                    "or disabled?); nothing fires from this process; retrying every %d ms.",
                    redact(no_scripting),
                    int(self.timing.retry_interval * 1000),
                )
            elif refused is None:
                self.logger.error("Cron leader loop failed: %s", redact(key), exc_info=True)
            elif refused:
                self.logger.warning(
                    "Redis refuses the cron scheduler's commands (%s): nothing fires meanwhile; retrying every %d ms.",
                    redact(refused),
                    int(self.timing.retry_interval * 1000),
                )
            else:
                self.logger.warning(
                    "Cron scheduler cannot reach Redis (%s); retrying every %d ms.",
                    redact(f"{type(exc).__name__}: {exc}"),
                    int(self.timing.retry_interval * 1000),
                )
