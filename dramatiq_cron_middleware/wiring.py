"""The composition root: the one place that builds a process's scheduler.

At boot the Redis source is resolved and parsed (:func:`boot`).  At
start the parts are built once each, in order (:class:`Wiring`): the
connections (command, blocking, shutdown, presence; all of them from
``store.connection.Connections``), the store (lease, ledger, runtime
reads) with its durability, the broker boundary, the leader thread with
its shutdown hand-over, and the monitoring threads beside it; or, in a
process that may not lead, the ineligible watch.  :class:`Running` holds
what runs and stops it.  The middleware's hooks call these.
"""

from __future__ import annotations

import builtins
import dataclasses
import threading
from typing import TYPE_CHECKING, Any

import redis
from dramatiq import Broker
from dramatiq.brokers.stub import StubBroker
from redis import Redis

from .config import ENV_LEAD
from .errors import CronBootError, CronConfigurationError, CronError, shown
from .leader.candidates import fingerprint
from .leader.ineligible import IneligibleWatch
from .leader.thread import Declared, LeaderObserver, LeaderThread, ServerChecks
from .monitoring.thread import MonitorThreads
from .schedules.schedule import BoundSchedule
from .shutdown import HandOver, register
from .store.boundary import BrokerBoundary, boundary_for
from .store.clock import ServerClock
from .store.connection import ENV_URL, Connections, describe, same_server, url_from_environment
from .store.durability import Durability, SentinelQuorum, required_replicas
from .store.ineligible import IneligibleSet
from .store.keys import Keys
from .store.lease import Candidate, Lease
from .store.ledger import Ledger
from .store.redis_store import RedisStore
from .store.runtime import RuntimeSchedules
from .store.server_identity import check_eviction_policy, identify

if TYPE_CHECKING:
    from .middleware import CronMiddleware

__all__ = ["Running", "Wiring", "boot", "redis_source", "schedule_table", "stub_without_redis"]


def redis_source(given: Any, broker: Broker) -> Any:
    """Where the scheduler's Redis is: ``given`` (the ``redis=`` argument),
    else ``DRAMATIQ_CRON_REDIS_URL``, else the client of a ``RedisBroker``.

    Raises:
      CronConfigurationError: none of the three is there.
    """
    if given is not None:
        return given
    url = url_from_environment()
    if url is not None:
        return url
    client = getattr(broker, "client", None)
    if client is not None and type(broker).__name__ == "RedisBroker":
        return client
    raise CronConfigurationError(
        "CronMiddleware: no Redis configured for the cron lease: pass CronMiddleware(redis='redis://...'), "
        f"set {ENV_URL}, or use a RedisBroker (the broker is {type(broker).__name__})."
    )


def stub_without_redis(given: Any, broker: Broker) -> bool:
    """A ``StubBroker`` and no Redis configured: a test of the app, where
    nothing could be scheduled across processes anyway."""
    return isinstance(broker, StubBroker) and given is None and url_from_environment() is None


def boot(cron: CronMiddleware, broker: Broker) -> None:
    """Parse the Redis source into the scheduler's clients, failing the
    worker's boot with one ERROR line (no traceback) and
    :class:`CronBootError` when it cannot be used."""
    try:
        cron.connections(broker).scheduler()
    except CronConfigurationError as exc:
        # One block, no traceback: dramatiq prints the traceback of any
        # other exception that stops a worker process.
        cron.logger.error("Cron scheduler cannot start, so this worker process stops: %s", exc)
        cron.logger.debug("The boot error was raised here.", exc_info=True)
        raise CronBootError(str(exc)) from None


@dataclasses.dataclass
class Running:
    """What runs in a process for one middleware: the leader thread and
    run monitoring's threads, or the ineligible watch."""

    leader: LeaderThread[HandOver] | None = None
    monitoring: MonitorThreads | None = None
    watch: IneligibleWatch | None = None

    def start(self) -> None:
        """Start the threads (the leader first)."""
        if self.leader is not None:
            self.leader.start()
        if self.monitoring is not None:
            self.monitoring.start()
        if self.watch is not None and not self.watch.is_alive():
            self.watch.start()

    def retire(self) -> None:
        """Of a leader thread that died: close its hand-over (its
        connection goes with it) and stop its monitoring."""
        if self.leader is not None and self.leader.hand_over is not None:
            self.leader.hand_over.close()
        if self.monitoring is not None:
            self.monitoring.stop(0)

    def stop(self, timeout: float) -> None:
        """Stop everything: monitoring told first and waited for after the
        leader thread has handed the lease over."""
        if self.watch is not None:
            self.watch.stop(timeout)
        if self.monitoring is not None:
            self.monitoring.stop(0)
        if self.leader is not None:
            self.leader.stop(timeout)
            if self.leader.hand_over is not None:
                self.leader.hand_over.close()
        if self.monitoring is not None:
            self.monitoring.join(0.1)


class Wiring:
    """Builds one start's parts from a middleware's configuration and the
    broker, each part once, over the middleware's connections."""

    def __init__(self, cron: CronMiddleware, broker: Broker) -> None:
        self.broker = broker
        self.config = cron.config
        self.keys: Keys = cron.keys
        self.timing = cron.timing
        self.logger = cron.logger
        self.connections: Connections = cron.connections(broker)
        self._all_schedules = cron.all_schedules
        self.schedules: builtins.list[BoundSchedule] = []

    def watch(self) -> IneligibleWatch:
        """In a process that may not lead: the thread that says it is alive
        and warns when nobody may lead (once)."""
        client, _ = self.connections.scheduler()
        self.logger.info(
            "Cron scheduler: this process is not eligible to lead (lead=False or %s=0); it never takes the lease.",
            ENV_LEAD,
        )
        entry = IneligibleSet(client, self.keys, self.timing)
        return IneligibleWatch(entry=entry, timing=self.timing, logger=self.logger)

    def leader(self, *, runtime: RuntimeSchedules, observer: LeaderObserver) -> LeaderThread[HandOver]:
        """The leader thread over this process's store and broker boundary,
        with its shutdown hand-over; the start log is written beside it."""
        self.schedules = self._declared(self._all_schedules())
        client, _ = self.connections.scheduler()
        where = describe(client)
        durability = self._durability()
        lease = self._lease(durability)
        ledger = Ledger(
            client=client,
            keys=self.keys,
            clock=lease.clock,
            history_length=self.config.history_length,
            durability=durability,
        )
        # The scheduler's client and the broker's: the same server means
        # the claim script can enqueue in the same atomic step.
        broker = self.broker
        same = same_server(client, getattr(broker, "client", None))
        mode = boundary_for(broker, lease_client=client, same_server=same)
        # The signal path releases on a connection of its own, outside
        # any pool: the leader thread may be mid-command on the pooled ones.
        shutdown_connection = self.connections.shutdown(self.keys.lease)
        timing = self.timing
        if lease.presence_client is None:  # fast takeover off, or it cannot work here
            timing = dataclasses.replace(timing, fast_takeover_ms=None)
        leader: LeaderThread[HandOver] = LeaderThread(
            store=RedisStore(lease=lease, ledger=ledger, runtime=runtime),
            boundary=BrokerBoundary(broker, mode, keys=self.keys, mark_ms=self._mark_ms()),
            declared=Declared.of(self.schedules, broker.actors),
            timing=timing,
            logger=self.logger,
            observer=observer,
            server=ServerChecks(
                identify=lambda: identify(client),
                at_boot=lambda: self._boot_check(client, durability, where=where),
            ),
        )
        leader.hand_over = register(HandOver(leader=leader, connection=shutdown_connection))
        self._log_start(runtime, f"{where} (lease {self.config.lock_ttl} ms, enqueue {mode.value.replace('_', ' ')})")
        return leader

    def _declared(self, schedules: builtins.list[BoundSchedule]) -> builtins.list[BoundSchedule]:
        """The declared schedules whose actor the broker still has, as the
        runtime ones are checked: an actor removed from ``broker.actors``
        after it was declared (a test fixture that clears them, as
        django_dramatiq's does) would only send messages the worker moves to
        the dead-letter queue, one ERROR each.  One WARNING names those
        skipped."""
        actors = self.broker.actors
        missing = sorted({s.actor_name for s in schedules if s.actor_name not in actors})
        if missing:
            self.logger.warning(
                "Declared cron schedules of %d actor(s) not on the broker any more are skipped: %s "
                "(removed from broker.actors after they were declared); they fire again once declared again",
                len(missing),
                ", ".join(shown(name) for name in missing[:10]) + (", ..." if len(missing) > 10 else ""),
            )
        return [s for s in schedules if s.actor_name in actors]

    def _durability(self) -> Durability:
        """How many replicas must confirm a write (decided at the boot check
        when ``replicas`` is None) and, on Sentinel, the sentinels' quorum."""
        durability = Durability(replicas=self.config.replicas or 0, wait_ms=self.timing.replica_wait_ms)
        sentinels = self.connections.sentinels()
        if sentinels is not None:  # a replica's acknowledgement is not enough: see durability.py
            durability.sentinels = SentinelQuorum(sentinels[0], service=sentinels[1])
        return durability

    def _lease(self, durability: Durability) -> Lease:
        client, blocking = self.connections.scheduler()
        return Lease(
            client=client,
            blocking_client=blocking,
            keys=self.keys,
            ttl_ms=self.config.lock_ttl,
            clock=ServerClock(on_step=lambda step: self.logger.warning("%s", step.describe())),
            candidate=Candidate(fingerprint=fingerprint(self.schedules), version=self.config.version.replace("|", "/")),
            presence_client=self.connections.presence() if self.config.fast_takeover else None,
            durability=durability,
        )

    def _boot_check(self, client: Redis, durability: Durability, *, where: str) -> None:
        """At the first turn that reaches Redis, before any write: the
        eviction policy, and how many replicas must confirm a write."""
        check_eviction_policy(client, self.logger, where=where)
        if self.config.replicas is None:
            sentinel = self.connections.sentinels() is not None
            durability.replicas = required_replicas(client, sentinel=sentinel, key=self.keys.lease)
        if durability.on:
            self.logger.info(
                "Cron claims and renewals wait for %d Redis replica(s) to acknowledge them (up to %d ms each)%s; "
                "a granted message is enqueued only then.",
                durability.replicas,
                durability.wait_ms,
                " and for a majority of the sentinels to name their master" if durability.sentinels else "",
            )

    def _mark_ms(self) -> int:
        """How long an idempotent enqueue's mark is kept: longer than any
        retry of an owed tick (the longest catch-up window) can last."""
        windows = [s.catch_up_window for s in self.schedules] or [self.config.catch_up_window]
        return max(windows) + 600_000

    def _log_start(self, runtime: RuntimeSchedules, where: str) -> None:
        """The start log, its runtime count read off the main thread: a
        worker's boot never waits on Redis for a log line."""
        started = f"Cron scheduler started on {where}: {len(self.schedules)} declared schedule(s)"
        table = schedule_table(self.schedules)
        threading.Thread(
            target=lambda: self.logger.info("%s, %s runtime schedule(s)%s", started, _runtime_count(runtime), table),
            name="cron-start-log",
            daemon=True,
        ).start()


def _runtime_count(runtime: RuntimeSchedules) -> str:
    """How many runtime schedules there are, for the start log."""
    try:
        return str(runtime.list(limit=1).total)
    except (CronError, redis.RedisError):
        return "an unknown number of (Redis did not answer)"


#: The start log lists at most this many declared schedules.
_TABLE_ROWS = 50


def schedule_table(schedules: builtins.list[BoundSchedule]) -> str:
    """The declared schedules, briefly, as the start log prints them after
    its first line: one line each (actor, name, expression, zone), or ""
    for none."""
    if not schedules:
        return ""
    rows = [("ACTOR", "NAME", "SCHEDULE", "ZONE")] + [
        (s.actor_name, s.name if s.named else "-", s.expression, s.timezone) for s in schedules[:_TABLE_ROWS]
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if len(schedules) > _TABLE_ROWS:
        lines.append(f"  ... and {len(schedules) - _TABLE_ROWS} more (dramatiq-cron list shows them all)")
    return ":\n" + "\n".join(lines)
