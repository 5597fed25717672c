"""Reading and steering the scheduler from outside the workers.

What an operator (or the ``dramatiq-cron`` command) asks of the scheduler
goes through here: who leads and until when, which candidates were seen,
each schedule's last decided tick, the history stream, and the paused set.
Nothing here needs the lease: pausing is a set the leader's fenced claim
consults, and a manual trigger is an ordinary message plus a history entry,
so none of it can disturb the ledger's exactly-once decisions.
"""

from __future__ import annotations

from ..audit import Triggered, TriggerRefused
from ..schedules.instants import pause_expiry
from ..store.operator import (
    Candidate,
    HistoryEntry,
    HistoryPage,
    LastDecision,
    LeaderInfo,
    RedisOperator,
    ReplicasLacking,
    replicas_lacking,
)
from ..targets import AmbiguousTarget, RuntimeCatalogue, Target, UnknownTarget, find_runtime, paused_by, resolve_target

__all__ = [
    "AmbiguousTarget",
    "Candidate",
    "Control",
    "HistoryEntry",
    "HistoryPage",
    "LastDecision",
    "LeaderInfo",
    "ReplicasLacking",
    "RuntimeCatalogue",
    "Target",
    "TriggerRefused",
    "Triggered",
    "UnknownTarget",
    "find_runtime",
    "pause_expiry",
    "paused_by",
    "replicas_lacking",
    "resolve_target",
]


class Control(RedisOperator):
    """Read one scheduler (one key prefix) in Redis: the store's operator
    half (:class:`~..store.operator.RedisOperator`), for the read-only
    pages; the actions go through the service (service.py).

    Parameters:
      client: A client with short timeouts and ``decode_responses=True``
        (see :func:`~dramatiq_cron_middleware.store.connection.scheduler_clients`).
      keys: The scheduler's key names.
      history_length: Approximate cap of the history stream.
    """

    def replicas_lacking(self) -> ReplicasLacking | None:
        """The last candidate whose writes lacked replicas, if recent (see
        ``CronMiddleware(replicas=...)``); None when none did."""
        return replicas_lacking(self.replicas_record())
