"""Reading and steering the scheduler from outside the workers.

What an operator (or the ``dramatiq-cron`` command) asks of the scheduler
goes through here: who leads and until when, which candidates were seen,
each schedule's last decided tick, the history stream, and the paused set.
Nothing here needs the lease: pausing is a set the leader's fenced claim
consults, and a manual trigger is an ordinary message plus a history entry,
so none of it can disturb the ledger's exactly-once decisions.
"""

from __future__ import annotations

import dataclasses

from ..audit import Triggered, TriggerRefused
from ..schedules.instants import pause_expiry
from ..store.operator import Candidate, HistoryEntry, HistoryPage, LastDecision, LeaderInfo, RedisOperator
from ..targets import AmbiguousTarget, RuntimeCatalogue, Target, UnknownTarget, find_runtime, paused_by, resolve_target
from ..times import span

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
    "resolve_target",
]


@dataclasses.dataclass(frozen=True)
class ReplicasLacking:
    """A candidate whose writes too few Redis replicas acknowledged (so
    nothing fires): the record it refreshes at each retry."""

    host: str
    pid: int
    acked: int
    required: int
    since_ms: int
    at_ms: int
    #: Why a majority of the sentinels does not confirm them ("": the
    #: replicas fell short).
    sentinels: str = ""

    def describe(self, now_ms: int) -> str:
        """One line for people."""
        if self.sentinels:
            return (
                f"the writes of {self.host} pid {self.pid} are not confirmed by the sentinels ({self.sentinels}; "
                f"for {span(now_ms - self.since_ms)}): nothing fires until they are"
            )
        return (
            f"{self.acked} of {self.required} Redis replica(s) acknowledge the writes of {self.host} pid {self.pid} "
            f"(for {span(now_ms - self.since_ms)}): nothing fires until they do"
        )


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


def replicas_lacking(fields: dict[str, str]) -> ReplicasLacking | None:
    """A replicas record (``OperatorStore.replicas_record``) as read; None without one."""
    try:
        host, pid, _ = str(fields["member"]).split("|", 2)
        return ReplicasLacking(
            host=host,
            pid=int(pid),
            acked=int(fields["acked"]),
            required=int(fields["required"]),
            since_ms=int(fields["since"]),
            at_ms=int(fields["at"]),
            sentinels=str(fields.get("sentinels", "")),
        )
    except (KeyError, ValueError):
        return None
