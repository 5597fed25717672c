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
import inspect
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq
import redis
from dramatiq import Broker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import TimeLimit

from .config import ENV_LEAD, CronConfig
from .errors import CronBootError, CronConfigurationError, CronError, CronScheduleError, shown
from .leader.candidates import fingerprint
from .leader.ineligible import IneligibleWatch
from .leader.thread import Declared, LeaderObserver, LeaderThread, ServerChecks
from .monitoring.config import MonitorConfig
from .monitoring.health import Policy
from .monitoring.recorder import RECORD_TIMEOUT_MS
from .monitoring.thread import HealthObserver, MonitorThreads, monitor_threads
from .schedules.schedule import DEFAULT_TIME_LIMIT, BoundSchedule, actor_signature
from .service import Cron
from .shutdown import HandOver, install, register
from .store.abc import RunStore
from .store.boundary import BrokerBoundary, boundary_for
from .store.clock import ServerClock
from .store.connection import ENV_URL, Connections, describe, same_server, url_from_environment
from .store.durability import Durability, SentinelQuorum, required_replicas
from .store.ineligible import IneligibleSet
from .store.keys import Keys
from .store.lease import Candidate, Lease
from .store.ledger import Ledger
from .store.operator import RedisOperator
from .store.redis_store import RedisStore
from .store.running_marks import RunningMarks
from .store.runs import RedisRuns
from .store.runtime import ActorInfo, RuntimeSchedules
from .store.server_identity import check_eviction_policy, identify

__all__ = [
    "Host",
    "OnRedis",
    "Parts",
    "Running",
    "SchedulerOff",
    "Wiring",
    "actor_info",
    "boot",
    "redis_source",
    "schedule_table",
    "stub_without_redis",
    "time_limit",
]


class Host(Protocol):
    """What the parts need of the middleware they serve (middleware.py's
    ``CronMiddleware``, one layer up: named here by what it offers)."""

    config: CronConfig
    monitor_config: MonitorConfig
    logger: Any
    leader_observer: LeaderObserver | None

    def connections(self, broker: Broker) -> Connections: ...

    def all_schedules(self) -> builtins.list[BoundSchedule]: ...

    def health_subject(self, schedule_id: str, schedule: BoundSchedule | None) -> tuple[str, str | None, Policy]: ...


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


def boot(cron: Host, broker: Broker) -> None:
    """Parse the Redis source into the scheduler's clients, failing the
    worker's boot with one ERROR line (no traceback) and
    :class:`CronBootError` when it cannot be used."""
    try:
        cron.connections(broker).scheduler()
    except CronConfigurationError as exc:
        # One block, no traceback: dramatiq prints the traceback of any
        # other exception that stops a worker process.
        main = dramatiq_main_process()
        if main is None:
            cron.logger.error("Cron scheduler cannot start, so this worker process stops: %s", exc)
        else:
            reason = str(exc).rstrip(".")
            cron.logger.error(
                "Cron scheduler cannot start, so dramatiq stops: %s. Fix that and start dramatiq again "
                "(--verbose logs the traceback).",
                reason,
            )
        cron.logger.debug("The boot error was raised here.", exc_info=True)
        if main:
            # dramatiq's main process logs a CRITICAL "exited unexpectedly"
            # for a worker process that exits before it was asked to stop:
            # ask it first, as SIGTERM does (it stops every worker process).
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.kill(main, signal.SIGTERM)
        raise CronBootError(str(exc)) from None


def dramatiq_main_process() -> int | None:
    """If this is a worker process of the ``dramatiq`` command booting
    (``dramatiq.cli.worker_process`` is on the stack): the main process's
    pid, or 0 once the main process asked it to stop.  Else None."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "worker_process" and frame.f_globals.get("__name__") == "dramatiq.cli":
            parent = multiprocessing.parent_process()
            return parent.pid if parent is not None and frame.f_locals.get("running") is True else 0
        frame = frame.f_back
    return None


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


class Parts:
    """What a middleware's hooks and Python API run on: this scheduler's
    Redis (:class:`OnRedis`), nothing on a ``StubBroker`` without Redis
    (:class:`SchedulerOff`), or a ``testing.CronSimulator``'s memory store
    handed in with ``CronMiddleware.use_parts``.  The middleware calls the
    same methods whichever it is; each does nothing unless a kind needs it."""

    def boot(self, broker: Broker) -> None:
        """At ``before_worker_boot``: check what the scheduler needs."""

    def after_boot(self, broker: Broker) -> None:
        """At ``after_worker_boot``: start what runs in the worker process."""

    def start(self, broker: Broker) -> LeaderThread[HandOver] | None:
        """Start the leader thread (or the ineligible watch), once."""
        return None

    def service(self) -> Cron:
        """The operator service the Python API delegates to."""
        raise NotImplementedError

    def run_store(self) -> RunStore | None:
        """Where the worker side records runs (None: nowhere)."""
        return None

    def clear_mark(self, schedule_id: str, message_id: str) -> None:
        """Clear a skip-overlap schedule's running mark held by a message."""


class SchedulerOff(Parts):
    """A ``StubBroker`` and no Redis configured (an app's own tests): the
    scheduler stays off, saying so once; actors run as usual."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self._said = False

    def boot(self, broker: Broker) -> None:
        if not self._said:
            self._said = True
            self.logger.info(
                "Cron scheduler off: the broker is a StubBroker and no Redis is configured (redis=, %s); "
                "actors run as usual. To test schedules, use dramatiq_cron_middleware.testing.CronSimulator.",
                ENV_URL,
            )

    def service(self) -> Cron:
        raise CronConfigurationError(
            "CronMiddleware: runtime schedules need Redis, and the broker is a StubBroker with none "
            "configured: in tests, attach a dramatiq_cron_middleware.testing.CronSimulator to the "
            f"broker (the calls then go to it); otherwise pass CronMiddleware(redis='redis://...') or set "
            f"{ENV_URL}"
        )


class OnRedis(Parts):
    """A middleware's parts on its Redis, every client from its
    ``Connections``: the leader thread and run monitoring (or the
    ineligible watch), the operator service, the run records and the
    running marks of the worker side."""

    def __init__(self, cron: Host, broker: Broker) -> None:
        self.cron = cron
        self.broker = broker
        self._lock = threading.Lock()
        self._running = Running()
        self._service: Cron | None = None
        self._runs: RedisRuns | None = None
        self._marks: RunningMarks | None = None

    @property
    def connections(self) -> Connections:
        return self.cron.connections(self.broker)

    @property
    def leader(self) -> LeaderThread[HandOver] | None:
        return self._running.leader

    def boot(self, broker: Broker) -> None:
        boot(self.cron, broker)

    def after_boot(self, broker: Broker) -> None:
        # Before the thread starts: a signal that comes the moment the
        # lease is won must already find the hand-over (it hands over
        # whatever leads then, nothing before the thread exists).  Once per
        # process, for every middleware of it (see shutdown.py).
        install()
        self.start(broker)

    def start(self, broker: Broker) -> LeaderThread[HandOver] | None:
        with self._lock:
            running = self._running
            if running.leader is not None and running.leader.is_alive():
                return running.leader
            running.retire()  # of a leader thread that died
            wiring = Wiring(self.cron, broker)
            if not self.cron.config.eligible:
                alive = running.watch is not None and running.watch.is_alive()
                self._running = Running(watch=running.watch if alive else wiring.watch())
                self._running.start()
                return None
            monitoring = monitoring_for(self.cron, self.connections, leader=lambda: self.leader)
            leader = wiring.leader(
                runtime=runtime_schedules(self.cron, self.connections.scheduler()[0], broker),
                observer=HealthObserver(monitoring.monitor, self.cron.leader_observer),
            )
            # Set before the threads start: monitoring reads the leader.
            self._running = Running(leader=leader, monitoring=monitoring)
            self._running.start()
            return leader

    def stop(self, timeout: float) -> None:
        """Stop what runs (the connections are the middleware's to close)."""
        with self._lock:
            running, self._running = self._running, Running()
        running.stop(timeout)

    def service(self) -> Cron:
        # Not the start lock: a web request asking for the runtime
        # schedules need not wait for a leader thread starting.
        if self._service is None:
            cron, client = self.cron, self.connections.operator()
            self._service = Cron(
                store=RedisOperator(client=client, keys=cron.config.keys, history_length=cron.config.history_length),
                runtime=runtime_schedules(cron, client, self.broker),
                declared=cron.all_schedules,
                broker=lambda: self.broker,
                prefix=cron.config.prefix,
                where=describe(client),
            )
        return self._service

    def run_store(self) -> RunStore | None:
        if self._runs is None:
            timeout = max(self.cron.config.timing.op_timeout_ms, RECORD_TIMEOUT_MS)
            self._runs = redis_runs(self.cron, self.connections.for_workers(timeout))
        return self._runs

    def clear_mark(self, schedule_id: str, message_id: str) -> None:
        if self._marks is None:
            timing, connections = self.cron.config.timing, self.connections
            self._marks = RunningMarks(
                keys=self.cron.config.keys,
                client_factory=lambda: connections.for_workers(timing.op_timeout_ms),
                logger=self.cron.logger,
            )
        self._marks.clear(schedule_id, message_id)


def runtime_schedules(cron: Host, client: Any, broker: Broker) -> RuntimeSchedules:
    """The runtime schedules in Redis through ``client``, checked against
    ``broker``'s actors and defaulting to ``cron``'s configuration."""
    return RuntimeSchedules(
        client,
        cron.config.keys,
        resolve_actor=lambda actor: actor_info(broker, actor),
        timezone=cron.config.timezone,
        catch_up=cron.config.catch_up,
        catch_up_window=cron.config.catch_up_window,
        history_length=cron.config.history_length,
    )


def redis_runs(cron: Host, client: Any, blocking: Any = None) -> RedisRuns:
    """The run records in Redis through ``client`` (and ``blocking``, for
    the monitor's wait on the events stream)."""
    return RedisRuns(
        client,
        cron.config.keys,
        run_history=cron.monitor_config.run_history,
        events_length=cron.config.history_length,
        blocking_client=blocking,
    )


def monitoring_for(
    cron: Host, connections: Connections, *, leader: Callable[[], LeaderThread[HandOver] | None]
) -> MonitorThreads:
    """Run monitoring's threads for the leader about to start: health
    decided and alerts delivered while this process leads."""

    def subject(schedule_id: str) -> tuple[str, str | None, Policy]:
        thread = leader()
        return cron.health_subject(schedule_id, thread.queue.schedules.get(schedule_id) if thread else None)

    def token() -> str | None:
        thread = leader()
        leadership = thread.leadership if thread is not None else None
        return None if leadership is None else leadership.token

    client, blocking = connections.scheduler()
    return monitor_threads(
        runs=redis_runs(cron, client, blocking),
        config=cron.monitor_config,
        subject=subject,
        token=token,
        timing=cron.config.timing,
        logger=cron.logger,
        on_health=getattr(cron.leader_observer, "health_decided", None),
    )


class Wiring:
    """Builds one start's parts from a middleware's configuration and the
    broker, each part once, over the middleware's connections."""

    def __init__(self, cron: Host, broker: Broker) -> None:
        self.broker = broker
        self.config = cron.config
        self.keys: Keys = cron.config.keys
        self.timing = cron.config.timing
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

    def _boot_check(self, client: Any, durability: Durability, *, where: str) -> None:
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


def actor_info(broker: Broker, actor: object) -> ActorInfo:
    """A declared actor's name, queue, time limit and signature, for a
    runtime schedule."""
    name = actor.actor_name if isinstance(actor, dramatiq.Actor) else actor
    if not isinstance(name, str):
        raise CronScheduleError(f"runtime schedule: actor must be an actor or an actor name, got {actor!r}")
    try:
        declared = broker.get_actor(name)
    except dramatiq.ActorNotFound:
        raise CronScheduleError(
            f"runtime schedule: actor {name!r} is not declared on the broker (import the module that declares it)"
        ) from None
    return ActorInfo(
        actor_name=declared.actor_name,
        queue_name=declared.queue_name,
        time_limit=time_limit(broker, declared),
        signature=actor_signature(declared.fn),
    )


def time_limit(broker: Broker, actor: dramatiq.Actor[Any, Any]) -> int:
    """The actor's time limit in ms, as dramatiq's ``TimeLimit`` would apply it."""
    limit = actor.options.get("time_limit")
    if limit is None:
        for middleware in broker.middleware:
            if isinstance(middleware, TimeLimit):
                limit = middleware.time_limit
                break
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
        return DEFAULT_TIME_LIMIT
    return int(limit)
