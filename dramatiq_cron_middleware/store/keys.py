"""The scheduler's keys in Redis, all under one hash tag.

Every key a script touches shares the tag ``{prefix}``, so on Redis Cluster
they live in one slot and the scripts may touch them together.  Two apps
with different prefixes on one Redis never see each other's keys.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Keys"]


@dataclasses.dataclass(frozen=True)
class Keys:
    """Names of the keys under ``prefix`` (see docs/design.md for lifetimes)."""

    prefix: str

    @property
    def tag(self) -> str:
        """The hash tag that puts every key in one cluster slot."""
        return "{" + self.prefix + "}"

    @property
    def lease(self) -> str:
        """Hash: token, epoch, host, pid, since, renewed, ttl; PEXPIREd to the lease."""
        return f"{self.tag}:lease"

    @property
    def epoch(self) -> str:
        """Counter incremented on every acquisition; never expires."""
        return f"{self.tag}:epoch"

    @property
    def ticks(self) -> str:
        """Hash: schedule id -> ``"<last tick ms>:<epoch>:<result>"`` (or
        ``:baseline``); the grammar is in protocol.py."""
        return f"{self.tag}:ticks"

    @property
    def shapes(self) -> str:
        """Hash: schedule id -> digest of what decides its ticks (expression
        or interval, zone, bounds); a change restarts the schedule from now."""
        return f"{self.tag}:shapes"

    @property
    def history(self) -> str:
        """Stream of tick outcomes, capped."""
        return f"{self.tag}:history"

    @property
    def candidates(self) -> str:
        """Sorted set: candidate -> last time seen (server ms)."""
        return f"{self.tag}:candidates"

    @property
    def ineligible(self) -> str:
        """Sorted set: processes that may not lead (``lead=False``),
        ``host|pid|id`` -> last seen (server ms)."""
        return f"{self.tag}:ineligible"

    @property
    def candidate_info(self) -> str:
        """Hash: candidate -> ``"<schedule fingerprint>|<app version>"``."""
        return f"{self.tag}:candidates:info"

    @property
    def candidate_sets(self) -> str:
        """Hash: schedule fingerprint -> JSON ``{schedule id: shape}`` of the
        candidates that declare that set."""
        return f"{self.tag}:candidates:sets"

    @property
    def wake(self) -> str:
        """List followers block on; a graceful release pushes to it."""
        return f"{self.tag}:wake"

    def wake_one(self, candidate_id: str) -> str:
        """A candidate's private wake-up list (used to stop its own wait)."""
        return f"{self.tag}:wake:{candidate_id}"

    @property
    def paused(self) -> str:
        """Set of paused schedule ids, and ``<actor>:*`` for actors paused
        as a whole (see ``protocol.whole_actor``)."""
        return f"{self.tag}:paused"

    @property
    def paused_until(self) -> str:
        """Hash: paused-set member -> the instant (epoch ms) its pause ends."""
        return f"{self.tag}:paused:until"

    def backfilled(self, schedule_id: str) -> str:
        """Hash: a schedule's ticks claimed by backfills, tick ms -> ``c|<run>``
        (claimed) or ``e`` (enqueued)."""
        return f"{self.tag}:backfill:{schedule_id}"

    def batch(self, batch_id: str) -> str:
        """Results of one claim batch, kept ten minutes for a caller whose
        reply was lost."""
        return f"{self.tag}:batch:{batch_id}"

    def running(self, schedule_id: str) -> str:
        """The message id of a schedule's message still queued or running
        (for ``overlap="skip"``), with a TTL so a crash cannot block it."""
        return f"{self.tag}:running:{schedule_id}"

    @property
    def outbox(self) -> str:
        """Hash (durable claims with a RedisBroker on this Redis): redis
        message id -> '<queue key>\\n<message hash key>\\n<body>' of granted
        messages staged by a claim until replicas hold it; published (and
        removed) by the claimer, or by the next leader."""
        return f"{self.tag}:outbox"

    @property
    def replicas(self) -> str:
        """Hash: the last candidate whose writes too few replicas
        acknowledged (member, acked, required, since, at); PEXPIREd to
        three leases, deleted when a candidate's writes are acknowledged."""
        return f"{self.tag}:replicas"

    def enqueued(self, message_id: str) -> str:
        """On the broker's Redis: the mark that a tick's message was pushed
        (idempotent enqueue), kept at least a catch-up window."""
        return f"{self.tag}:enqueued:{message_id}"

    @property
    def runtime(self) -> str:
        """Hash: runtime schedule id (``actor:name``) -> its definition, JSON
        ``{"v": 1, ...}`` (see runtime.py)."""
        return f"{self.tag}:runtime"

    @property
    def runtime_revs(self) -> str:
        """Hash: runtime schedule id -> the revision it was last written at;
        deleted on removal.  The fenced claim of a runtime schedule checks it."""
        return f"{self.tag}:runtime:revs"

    @property
    def runtime_version(self) -> str:
        """Counter incremented by every write or removal of a runtime
        schedule; the new value is that write's revision."""
        return f"{self.tag}:runtime:version"

    @property
    def runtime_notify(self) -> str:
        """List holding at most one notification, pushed by every write or
        removal of a runtime schedule, that the idle leader blocks on;
        expires after ten minutes (a new leader reads everything anyway)."""
        return f"{self.tag}:runtime:notify"

    @property
    def runtime_changes(self) -> str:
        """Sorted set: runtime schedule id -> version of its last write or
        removal (a removed id stays as a tombstone)."""
        return f"{self.tag}:runtime:changes"

    @property
    def runtime_ids(self) -> str:
        """Sorted set, every score 0: the ids of stored runtime schedules, in
        lexical order for paginated listing."""
        return f"{self.tag}:runtime:ids"

    def dedup(self, message_id: str) -> str:
        """The claim of a cron message's latest attempt,
        ``"<attempt>|<claim token>"`` (``CronDeduplication``), with a TTL of
        at least the catch-up window plus the time a message may wait."""
        return f"{self.tag}:dedup:{message_id}"

    # -- run monitoring (monitoring/) ------------------------------------------

    def runs(self, schedule_id: str) -> str:
        """Hash: tick ms -> the JSON record of that tick's run (its latest
        attempt); the newest ``run_history`` are kept."""
        return f"{self.tag}:runs:{schedule_id}"

    def runs_order(self, schedule_id: str) -> str:
        """Sorted set: the ticks of :meth:`runs`, scored by tick (the trim
        drops the oldest)."""
        return f"{self.tag}:runs-order:{schedule_id}"

    @property
    def runs_last(self) -> str:
        """Hash: schedule id -> the JSON record of its newest run."""
        return f"{self.tag}:runs:last"

    @property
    def run_events(self) -> str:
        """Stream of run starts and finishes (capped), which the leader reads
        from :attr:`health_cursor` on to decide health."""
        return f"{self.tag}:runs:events"

    @property
    def runs_open(self) -> str:
        """Sorted set: ``p|<tick>|<schedule id>`` (enqueued, not started) and
        ``r|<tick>|<schedule id>`` (running), scored by the deadline after
        which the run is late or running long."""
        return f"{self.tag}:runs:open"

    @property
    def health(self) -> str:
        """Hash: schedule id -> JSON of its health as the leader decided it
        (fenced writes only)."""
        return f"{self.tag}:health"

    @property
    def health_cursor(self) -> str:
        """Hash, field ``events``: the id of the last entry of
        :attr:`run_events` the leader decided on (fenced writes only): a new
        leader carries on from there."""
        return f"{self.tag}:health:cursor"

    @property
    def alerts(self) -> str:
        """List: ``on_alert``'s alert outbox, appended with every health
        change that alerts (fenced) and popped once delivered."""
        return f"{self.tag}:alerts"

    @property
    def alerts_webhook(self) -> str:
        """List: the webhook's alert outbox (as :attr:`alerts`, delivered on
        its own so that one sink never holds back the other)."""
        return f"{self.tag}:alerts:webhook"

    @property
    def runs_alive(self) -> str:
        """Sorted set: ``r|<tick>|<schedule id>`` of every run a live worker
        is running, scored by when its heartbeat lapses (Redis time, ms):
        a run past ``max_runtime`` is ``lost`` only once it lapsed."""
        return f"{self.tag}:runs:alive"
