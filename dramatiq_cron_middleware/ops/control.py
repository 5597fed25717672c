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
from ..store.operator import Candidate, HistoryEntry, HistoryPage, LastDecision, LeaderInfo, RedisOperator
from ..targets import AmbiguousTarget, RuntimeCatalogue, Target, UnknownTarget, find_runtime, paused_by, resolve_target
from .format import duration_ms, instant_ms, iso, span

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


def pause_expiry(now_ms: int, *, until: object = None, duration: object = None) -> int | None:
    """When a pause given ``until`` or ``duration`` ends, in epoch ms (None:
    until resumed), for the CLI, the API and the dashboard alike.

    Parameters:
      now_ms: Redis's time (the scheduler's clock).
      until: An aware ``datetime``, epoch milliseconds, or an ISO 8601
        text with its offset (``2026-12-24T09:00+01:00``, ``...Z``).
      duration: Milliseconds, a ``timedelta``, or a text such as ``2h``,
        ``90m``, ``1h30m``.

    Raises:
      ValueError: naming the value: both given, unreadable, not positive,
        or an instant not after ``now_ms``.
    """
    if until is not None and duration is not None:
        raise ValueError(f"give a pause's end or its duration, not both (got until={until!r}, for={duration!r})")
    if duration is not None:
        return now_ms + duration_ms(duration)
    if until is None:
        return None
    try:
        until = instant_ms(until)
    except ValueError as exc:
        raise ValueError(f"a pause's end: {exc}") from None
    if until <= now_ms:
        raise ValueError(f"a pause's end must be in the future, got {iso(until)} (Redis's time is {iso(now_ms)})")
    return until
