"""The scheduler's keys in Redis, all under one hash tag.

Every key a script touches shares the tag ``{prefix}``, so on Redis Cluster
they live in one slot and the scripts may touch them together.  Two apps
with different prefixes on one Redis never see each other's keys.
"""

from __future__ import annotations

__all__ = ["Keys"]


class Keys:
    """Names of the keys under ``prefix`` (see docs/design.md for lifetimes).

    Parameters:
      prefix: What every key name holds, inside its hash tag.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        #: The hash tag that puts every key in one cluster slot.
        self.tag = t = "{" + prefix + "}"
        #: Hash: token, epoch, host, pid, since, renewed, ttl; PEXPIREd to the lease.
        self.lease = f"{t}:lease"
        #: Counter incremented on every acquisition; never expires.
        self.epoch = f"{t}:epoch"
        #: Hash: schedule id -> ``"<last tick ms>:<epoch>:<result>"`` (or ``:baseline``); the grammar is in
        #: codes.py.
        self.ticks = f"{t}:ticks"
        #: Hash: schedule id -> digest of what decides its ticks (expression or interval, zone, bounds); a
        #: change restarts the schedule from now.
        self.shapes = f"{t}:shapes"
        #: Stream of tick outcomes, capped.
        self.history = f"{t}:history"
        #: Sorted set: candidate -> last time seen (server ms).
        self.candidates = f"{t}:candidates"
        #: Sorted set: processes that may not lead (``lead=False``), ``host|pid|id`` -> last seen (server ms).
        self.ineligible = f"{t}:ineligible"
        #: Hash: candidate -> ``"<schedule fingerprint>|<app version>"``.
        self.candidate_info = f"{t}:candidates:info"
        #: Hash: schedule fingerprint -> JSON ``{schedule id: shape}`` of the candidates that declare that set.
        self.candidate_sets = f"{t}:candidates:sets"
        #: List followers block on; a graceful release pushes to it.
        self.wake = f"{t}:wake"
        #: Set of paused schedule ids, and ``<actor>:*`` for actors paused as a whole (see
        #: ``schedules.ids.whole_actor``).
        self.paused = f"{t}:paused"
        #: Hash: paused-set member -> the instant (epoch ms) its pause ends.
        self.paused_until = f"{t}:paused:until"
        #: Hash (durable claims with a RedisBroker on this Redis): redis message id -> '<queue key>\n<message
        #: hash key>\n<body>' of granted messages staged by a claim until replicas hold it; published (and
        #: removed) by the claimer, or by the next leader.
        self.outbox = f"{t}:outbox"
        #: Hash: the last candidate whose writes too few replicas acknowledged (member, acked, required, since,
        #: at); PEXPIREd to three leases, deleted when a candidate's writes are acknowledged.
        self.replicas = f"{t}:replicas"
        #: Hash: runtime schedule id (``actor:name``) -> its definition, JSON ``{"v": 1, ...}`` (see
        #: runtime.py).
        self.runtime = f"{t}:runtime"
        #: Hash: runtime schedule id -> the revision it was last written at; deleted on removal.  The fenced
        #: claim of a runtime schedule checks it.
        self.runtime_revs = f"{t}:runtime:revs"
        #: Counter incremented by every write or removal of a runtime schedule; the new value is that write's
        #: revision.
        self.runtime_version = f"{t}:runtime:version"
        #: List holding at most one notification, pushed by every write or removal of a runtime schedule, that
        #: the idle leader blocks on; expires after ten minutes (a new leader reads everything anyway).
        self.runtime_notify = f"{t}:runtime:notify"
        #: Sorted set: runtime schedule id -> version of its last write or removal (a removed id stays as a
        #: tombstone).
        self.runtime_changes = f"{t}:runtime:changes"
        #: Sorted set, every score 0: the ids of stored runtime schedules, in lexical order for paginated
        #: listing.
        self.runtime_ids = f"{t}:runtime:ids"

        # -- run monitoring (monitoring/) ------------------------------------------
        #: Hash: schedule id -> the JSON record of its newest run.
        self.runs_last = f"{t}:runs:last"
        #: Stream of run starts and finishes (capped), which the leader reads from :attr:`health_cursor` on to
        #: decide health.
        self.run_events = f"{t}:runs:events"
        #: Sorted set: ``p|<tick>|<schedule id>`` (enqueued, not started) and ``r|<tick>|<schedule id>``
        #: (running), scored by the deadline after which the run is late or running long.
        self.runs_open = f"{t}:runs:open"
        #: Hash: schedule id -> JSON of its health as the leader decided it (fenced writes only).
        self.health = f"{t}:health"
        #: Hash, field ``events``: the id of the last entry of :attr:`run_events` the leader decided on (fenced
        #: writes only): a new leader carries on from there.
        self.health_cursor = f"{t}:health:cursor"
        #: List: ``on_alert``'s alert outbox, appended with every health change that alerts (fenced) and popped
        #: once delivered.
        self.alerts = f"{t}:alerts"
        #: List: the webhook's alert outbox (as :attr:`alerts`, delivered on its own so that one sink never
        #: holds back the other).
        self.alerts_webhook = f"{t}:alerts:webhook"
        #: Sorted set: ``r|<tick>|<schedule id>`` of every run a live worker is running, scored by when its
        #: heartbeat lapses (Redis time, ms): a run past ``max_runtime`` is ``lost`` only once it lapsed.
        self.runs_alive = f"{t}:runs:alive"

    def wake_one(self, candidate_id: str) -> str:
        """A candidate's private wake-up list (used to stop its own wait)."""
        return f"{self.tag}:wake:{candidate_id}"

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

    def enqueued(self, message_id: str) -> str:
        """On the broker's Redis: the mark that a tick's message was pushed
        (idempotent enqueue), kept at least a catch-up window."""
        return f"{self.tag}:enqueued:{message_id}"

    def dedup(self, message_id: str) -> str:
        """The claim of a cron message's latest attempt,
        ``"<attempt>|<claim token>"`` (``CronDeduplication``), with a TTL of
        at least the catch-up window plus the time a message may wait."""
        return f"{self.tag}:dedup:{message_id}"

    def runs(self, schedule_id: str) -> str:
        """Hash: tick ms -> the JSON record of that tick's run (its latest
        attempt); the newest ``run_history`` are kept."""
        return f"{self.tag}:runs:{schedule_id}"

    def runs_order(self, schedule_id: str) -> str:
        """Sorted set: the ticks of :meth:`runs`, scored by tick (the trim
        drops the oldest)."""
        return f"{self.tag}:runs-order:{schedule_id}"
