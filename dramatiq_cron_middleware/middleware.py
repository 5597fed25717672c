"""The middleware: configuration, the ``cron`` actor option, and the hooks
that start and stop the leader thread in every worker process."""

from __future__ import annotations

import builtins
import datetime as dt
import functools
import os
import socket
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import dramatiq
import redis
from dramatiq import Broker, Middleware, Worker
from dramatiq.brokers.stub import StubBroker
from dramatiq.logging import get_logger
from dramatiq.middleware import TimeLimit
from redis import Redis
from redis.sentinel import SentinelConnectionPool

from .audit import Action, AuditLog, Changed, Triggered, TriggerRefused, check_who, log_actions
from .config import DEFAULT_CATCH_UP_WINDOW, DEFAULT_LOCK_TTL, ENV_LEAD, CronConfig
from .errors import CronBootError, CronConfigurationError, CronError, CronScheduleError, CronUnavailableError, shown
from .leader.candidates import fingerprint
from .leader.ineligible import IneligibleWatch
from .leader.thread import LeaderObserver, LeaderThread
from .monitoring.config import (
    DEFAULT_ALERT_FOR,
    DEFAULT_FAILURE_THRESHOLD,
    DEFAULT_GRACE,
    DEFAULT_RUN_HISTORY,
    RUNTIME_SLACK,
    MonitorConfig,
)
from .monitoring.health import Policy
from .monitoring.recorder import RECORD_TIMEOUT_MS, RunRecorder, StoreSink
from .monitoring.records import Alert
from .monitoring.thread import HealthObserver, MonitorThreads, monitor_threads
from .schedules.ids import parse_id
from .schedules.schedule import (
    DEFAULT_TIME_LIMIT,
    BoundSchedule,
    CatchUp,
    Schedule,
    actor_signature,
    schedules_for_actor,
)
from .shutdown import HandOver, dedicated_connection, install, register
from .store.abc import RunStore
from .store.boundary import BrokerBoundary, boundary_for
from .store.clock import ServerClock
from .store.connection import (
    ENV_URL,
    close_clients,
    credentials_refused,
    describe,
    presence_client,
    redact,
    same_server,
    scheduler_clients,
    sentinels_of,
    url_from_environment,
)
from .store.durability import Durability, SentinelQuorum, required_replicas
from .store.keys import Keys
from .store.lease import Lease
from .store.ledger import Ledger
from .store.redis_store import RedisStore
from .store.running_marks import RunningMarks
from .store.runs import RedisRuns
from .store.runtime import (
    ActorInfo,
    RuntimePage,
    RuntimeSchedule,
    RuntimeSchedules,
    describe_changes,
    split_id,
)
from .store.server_identity import check_eviction_policy, identify
from .store.timing import Timing
from .targets import Target, resolve_target

if TYPE_CHECKING:  # ops sits above the middleware: imported where used
    from .ops.backfill import BackfillPlan, BackfillReport

__all__ = ["CronConfig", "CronMiddleware", "find_middleware"]


class CronMiddleware(Middleware):
    """Enqueues messages for actors declared with a ``cron`` option, from
    inside the worker processes, exactly once per scheduled tick.

    Every worker process runs a leader thread; the threads compete for a
    lease in Redis, and only the holder fires, each fire being a claim that
    Redis checks against the lease (see docs/design.md).  Add the middleware
    to the broker *before* declaring actors.

    Parameters:
      redis(str|redis.Redis): Where the lease and the tick ledger live: a
        ``redis://``/``rediss://``/``unix://`` URL or a redis-py client
        (only its connection parameters are used; the scheduler makes its
        own connections with short timeouts).  Defaults to None, meaning
        the URL in ``DRAMATIQ_CRON_REDIS_URL``, else the broker's client if
        the broker is a ``RedisBroker``, else an error when the worker boots
        (on a ``StubBroker`` the scheduler stays off instead: an app's tests).
      lock_ttl(int): The lease length in milliseconds.  The leader renews
        every third of it and stops firing two thirds into it without a
        successful renewal; after a crash a follower takes over within
        about one ``lock_ttl``.  Defaults to 15000 (Kubernetes' lease).
      catch_up(str): What a new leader does with ticks that fell due while
        nobody led: ``"each"`` fires every one inside the window once,
        ``"latest"`` only the newest, ``"none"`` none.  Defaults to
        ``"each"``.  Actors and schedules may override it.
      catch_up_window(int): How far back, in milliseconds, missed ticks are
        still caught up; older ones are recorded as missed.  Defaults to
        300000 (five minutes: a failover, a restart or a deploy).
      timezone(str): The IANA time zone expressions are evaluated in unless
        a schedule names its own.  Defaults to ``"UTC"``.
      prefix(str): Prefix of every key in Redis (used as a hash tag).  Apps
        sharing a Redis need distinct prefixes.  Defaults to
        ``"dramatiq-cron"``.
      history_length(int): Approximate number of tick outcomes kept in the
        history stream.  Defaults to 10000.
      fast_takeover(int): Opt-in: followers check every this many
        milliseconds whether the leader's process is gone (its registered
        Redis connection closed) and then take over at once instead of
        waiting for the lease to expire.  Costs each follower about three
        Redis commands per interval and needs the ``CLIENT`` command (ACL
        ``+client|list +client|id``); not available on Redis Cluster.
        Defaults to None, meaning followers wait for the lease.
      app_version(str): A label of this code version (a release, a commit),
        published with each candidate beside its schedule set's fingerprint
        and shown by ``dramatiq-cron status``, so that mixed versions during
        a rolling deploy are told from two apps sharing a prefix.  Defaults
        to None, meaning ``DRAMATIQ_CRON_APP_VERSION`` if set, else none.
      lead(bool): Whether this process may lead.  False (or the
        environment variable ``DRAMATIQ_CRON_LEAD=0``) for processes that
        run workers but must never fire schedules (spot instances, a pool
        near its memory limit): they never compete for the lease, only say
        once per lease that they are alive (shown as "not eligible" by
        ``status``), and warn once when no eligible process is live.
        Defaults to True.
      one_shot_retention(int): How long, in milliseconds after its
        instant, a one-shot runtime schedule (``add(..., at=...)``) that
        fired (or was decided otherwise) stays listed as done before the
        leader removes it.  Defaults to 86400000 (a day).
      grace(int): Run monitoring: how long in milliseconds a fired tick's
        run may take to start before its schedule is ``late``, and a tick
        may be overdue undecided before it is ``missed``.  Defaults to
        60000 (Sentry Crons' check-in margin).  Schedules may override it.
      max_runtime(int): Run monitoring: how long in milliseconds a run may
        take before its schedule is ``running_long``.  Defaults to None,
        meaning each actor's ``time_limit`` plus 5 s.  Schedules may
        override it.
      failure_threshold(int): Run monitoring: failed runs in a row after
        which a schedule is ``failing``.  Defaults to 1.  Schedules may
        override it.
      run_history(int): Runs kept per schedule in Redis.  Defaults to 100.
      on_alert(callable): Called with an :class:`~.monitoring.Alert` when a
        schedule's health changes into ``late``, ``running_long``,
        ``failing`` or ``missed``, or back to ``ok``; on a thread of its
        own in the leading process, at least once per change.  Its
        exceptions are logged.  Defaults to None.
      alert_webhook(str): An ``http(s)://`` URL each alert is POSTed to as
        JSON (``id``, ``schedule``, ``actor``, ``name``, ``state``,
        ``previous``, ``tick``, ``at``, ``error``) with the alert's id as
        its ``Idempotency-Key``, on its own thread, retried with back-off
        until it answers 2xx, for an hour at most.  Defaults to None.
      alert_for(int): Run monitoring: how long in milliseconds a change of
        health must last before it alerts (Alertmanager's ``for:``; returns
        to ``ok`` shorter than that do not end a problem, so a flapping
        schedule alerts once).  Defaults to 60000.  0 alerts every change.
      replicas(int): How many Redis replicas must acknowledge (``WAIT``) a
        claim before its messages are enqueued, and a renewal before it
        counts, so that a failover never loses a granted tick to fire it
        twice, and a leader cut off from its replicas stops firing.  While
        fewer replicas acknowledge, nothing fires (one WARNING).  0 fires
        without waiting: availability over safety (a failover can then
        fire a tick twice).  Defaults to None, meaning 1 on Sentinel or on
        a master that has replicas connected when the worker starts, and 0
        on a single Redis.
    """

    def __init__(
        self,
        *,
        redis: Any = None,
        lock_ttl: int = DEFAULT_LOCK_TTL,
        catch_up: CatchUp = "each",
        catch_up_window: int = DEFAULT_CATCH_UP_WINDOW,
        timezone: str = "UTC",
        prefix: str = "dramatiq-cron",
        history_length: int = 10_000,
        fast_takeover: int | None = None,
        app_version: str | None = None,
        lead: bool = True,
        one_shot_retention: int = 86_400_000,
        grace: int = DEFAULT_GRACE,
        max_runtime: int | None = None,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        run_history: int = DEFAULT_RUN_HISTORY,
        on_alert: Callable[[Alert], object] | None = None,
        alert_webhook: str | None = None,
        alert_for: int = DEFAULT_ALERT_FOR,
        replicas: int | None = None,
    ) -> None:
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        #: The checked arguments; read them through the properties below.
        self.config = CronConfig(
            redis=redis,
            lock_ttl=lock_ttl,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            timezone=timezone,
            prefix=prefix,
            history_length=history_length,
            fast_takeover=fast_takeover,
            app_version=app_version,
            lead=lead,
            one_shot_retention=one_shot_retention,
            replicas=replicas,
        )
        #: The run monitoring arguments, checked.
        self.monitor_config = MonitorConfig(
            grace=grace,
            max_runtime=max_runtime,
            failure_threshold=failure_threshold,
            run_history=run_history,
            on_alert=on_alert,
            alert_webhook=alert_webhook,
            alert_for=alert_for,
        )
        self.schedules: dict[str, list[BoundSchedule]] = {}
        self.leader: LeaderThread[HandOver] | None = None
        self._watch: IneligibleWatch | None = None
        self._observer: LeaderObserver | None = None
        self._simulator: Any = None
        self._off_logged = False
        self._start_lock = threading.Lock()
        self._marks: RunningMarks | None = None
        self._recorder: RunRecorder | None = None
        self._monitoring: MonitorThreads | None = None
        self._built: tuple[Redis, Redis] | None = None
        #: Every Redis client this middleware built: their connections are
        #: closed when it stops (each reconnects if used again); those of
        #: the worker threads (run records, running marks) once the worker
        #: has drained, not under a message being processed.
        self._owned: list[Redis] = []
        self._owned_by_workers: list[Redis] = []
        self._broker: Broker | None = None  # runtime schedules check actors against it
        self._runtime: RuntimeSchedules | None = None
        # Not the start lock: a web request asking for the runtime schedules
        # need not wait for a leader thread starting.
        self._runtime_lock = threading.Lock()
        self._audit: AuditLog | None = None

    # -- the configuration, read-only -----------------------------------------

    @property
    def redis(self) -> Any:
        """The ``redis=`` argument (None: found at boot, see :meth:`redis_source`)."""
        return self.config.redis

    @property
    def lock_ttl(self) -> int:
        """The lease length in milliseconds."""
        return self.config.lock_ttl

    @property
    def catch_up(self) -> CatchUp:
        """The catch-up policy of schedules that name none."""
        return self.config.catch_up

    @property
    def catch_up_window(self) -> int:
        """The catch-up window, in milliseconds, of schedules that name none."""
        return self.config.catch_up_window

    @property
    def timezone(self) -> str:
        """The time zone of schedules that name none."""
        return self.config.timezone

    @property
    def prefix(self) -> str:
        """The prefix of every key in Redis."""
        return self.config.prefix

    @property
    def history_length(self) -> int:
        """The approximate length of the history stream."""
        return self.config.history_length

    @property
    def keys(self) -> Keys:
        """The scheduler's keys in Redis."""
        return self.config.keys

    @property
    def timing(self) -> Timing:
        """Every duration, derived once from ``lock_ttl``."""
        return self.config.timing

    def health_policy(self, schedule: BoundSchedule) -> Policy:
        """A schedule's monitoring thresholds: its own, else this
        middleware's, else (``max_runtime``) its actor's time limit plus 5 s."""
        config = self.monitor_config
        max_runtime = schedule.max_runtime if schedule.max_runtime is not None else config.max_runtime
        if max_runtime is None:
            actor = self._broker.actors.get(schedule.actor_name) if self._broker is not None else None
            limit = _time_limit(self._broker, actor) if actor is not None and self._broker is not None else None
            max_runtime = (limit or DEFAULT_TIME_LIMIT) + RUNTIME_SLACK
        return Policy(
            grace_ms=schedule.grace if schedule.grace is not None else config.grace,
            max_runtime_ms=max_runtime,
            failure_threshold=(
                schedule.failure_threshold if schedule.failure_threshold is not None else config.failure_threshold
            ),
            jitter_ms=schedule.jitter,
            alert_for_ms=config.alert_for,
        )

    def health_subject(self, schedule_id: str, schedule: BoundSchedule | None) -> tuple[str, str | None, Policy]:
        """``(actor, name, policy)`` of a schedule the leader decides health
        for; a schedule it no longer knows (a removed runtime schedule whose
        runs are still reported) gets this middleware's defaults."""
        if schedule is not None:
            return schedule.actor_name, schedule.name if schedule.named else None, self.health_policy(schedule)
        parsed = parse_id(schedule_id)
        return parsed.actor, parsed.name, self.monitor_config.default_policy()

    def attach_simulator(self, simulator: Any) -> None:
        """Let ``simulator`` (a ``testing.CronSimulator``) fire the ticks and
        keep the runtime schedules (workers then start no leader thread and
        need no Redis), or no simulator again (None)."""
        self._simulator = simulator

    def observe_leader(self, observer: LeaderObserver | None) -> None:
        """Tell ``observer`` what the leader thread started from now on does
        (``CronMetrics`` uses it)."""
        self._observer = observer

    @property
    def actor_options(self) -> set[str]:
        """The actor option this middleware adds: ``cron``."""
        return {"cron"}

    # -- declaration ----------------------------------------------------------

    def before_declare_actor(self, broker: Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        """Validate the actor's ``cron`` option; a bad one raises
        :class:`CronScheduleError` out of the ``@dramatiq.actor`` decorator."""
        spec = self.schedule_option(actor)
        if spec is None:
            self.schedules.pop(actor.actor_name, None)
            return
        self.schedules[actor.actor_name] = schedules_for_actor(
            actor.actor_name,
            actor.queue_name,
            spec,
            timezone=self.timezone,
            catch_up=self.catch_up,
            catch_up_window=self.catch_up_window,
            time_limit=_time_limit(broker, actor),
            signature=actor_signature(actor.fn),
        )

    def schedule_option(self, actor: dramatiq.Actor[Any, Any]) -> object:
        """What the actor declares to schedule: its ``cron`` option (None:
        not a cron actor).  ``compat.periodiq`` reads ``periodic=`` here."""
        return actor.options.get("cron")

    # -- the worker side: run records, overlap="skip" marks --------------------

    def before_process_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Record that a cron message's run starts (run monitoring)."""
        if "cron_tick" in message.options:  # every other message: this one test
            self.run_recorder(broker).started(message)

    def after_process_message(
        self,
        broker: Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Note how a cron message's run ended, and clear the running mark
        of a skip-overlap schedule whose message succeeded (one that failed
        for good is cleared at :meth:`after_nack`: ``Retries`` decides only
        after this hook, dramatiq calling these hooks in reverse order; a
        retry keeps it)."""
        if "cron_tick" not in message.options:
            return
        self.run_recorder(broker).processed(message, exception)
        if exception is None and not message.failed:
            self._clear_running_mark(broker, message)

    def after_skip_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Record a cron message that will not run (dropped by ``AgeLimit``
        for its ``max_age``, or as a duplicate), and clear its running mark."""
        if "cron_tick" in message.options:
            self.run_recorder(broker).dropped(message)
            self._clear_running_mark(broker, message)

    def after_ack(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Record the finish of a cron message's run: succeeded, or failed
        and requeued by ``Retries`` (which runs after this middleware's
        ``after_process_message``, so only now is a retry known)."""
        if "cron_tick" in message.options:
            self.run_recorder(broker).settled(message, rejected=False)

    def after_nack(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Record the finish of a cron message's run that failed for good,
        and clear its schedule's running mark."""
        if "cron_tick" in message.options:
            self.run_recorder(broker).settled(message, rejected=True)
            self._clear_running_mark(broker, message)

    def run_recorder(self, broker: Broker) -> RunRecorder:
        """The one recorder of this process's cron runs: its sinks are the
        run records in the store (the simulator's when one is attached,
        else Redis through a short-timeout client built on first use; none
        on a StubBroker without Redis), and those ``CronMetrics`` and
        ``SentryCrons`` add."""
        if self._recorder is None:
            with self._start_lock:
                if self._recorder is None:
                    redis_runs = functools.cache(
                        lambda: self._redis_runs(
                            self._own_for_workers(
                                scheduler_clients(
                                    self.redis_source(broker),
                                    op_timeout_ms=max(self.timing.op_timeout_ms, RECORD_TIMEOUT_MS),
                                    block_timeout_ms=0,
                                )
                            )[0]
                        )
                    )

                    def store() -> RunStore | None:
                        if self._simulator is not None:
                            return cast(RunStore, self._simulator.run_store)
                        return None if self._stub_without_redis(broker) else redis_runs()

                    self._recorder = RunRecorder(logger=self.logger, sinks=[StoreSink(store=store, logger=self.logger)])
        return self._recorder

    def _clear_running_mark(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        if self._simulator is not None or message.options.get("cron_overlap") != "skip":
            return
        schedule_id = message.options.get("cron_schedule")
        if not isinstance(schedule_id, str):
            return
        if self._marks is None:
            with self._start_lock:
                if self._marks is None:
                    self._marks = RunningMarks(
                        keys=self.keys,
                        client_factory=lambda: self._own_for_workers(
                            scheduler_clients(
                                self.redis_source(broker), op_timeout_ms=self.timing.op_timeout_ms, block_timeout_ms=0
                            )
                        )[0],
                        logger=self.logger,
                    )
        self._marks.clear(schedule_id, message.message_id)

    def _redis_runs(self, client: Redis, blocking: Redis | None = None) -> RedisRuns:
        config = self.monitor_config
        return RedisRuns(
            client,
            self.keys,
            run_history=config.run_history,
            events_length=self.history_length,
            blocking_client=blocking,
        )

    def all_schedules(self) -> list[BoundSchedule]:
        """Every declared schedule, in declaration order."""
        return [s for schedules in self.schedules.values() for s in schedules]

    # -- worker life cycle ----------------------------------------------------

    def before_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Resolve and parse the Redis connection, failing the boot with one
        clear error when none is configured or the URL is malformed.  On a
        ``StubBroker`` with no Redis configured (an app's own tests) the
        scheduler stays off instead, saying so once."""
        if self._simulator is not None:
            return
        if self._stub_without_redis(broker):
            if not self._off_logged:
                self._off_logged = True
                self.logger.info(
                    "Cron scheduler off: the broker is a StubBroker and no Redis is configured (redis=, %s); "
                    "actors run as usual. To test schedules, use dramatiq_cron_middleware.testing.CronSimulator.",
                    ENV_URL,
                )
            return
        try:
            self._clients(broker)
        except CronConfigurationError as exc:
            # One block, no traceback: dramatiq prints the traceback of any
            # other exception that stops a worker process.
            self.logger.error("Cron scheduler cannot start, so this worker process stops: %s", exc)
            self.logger.debug("The boot error was raised here.", exc_info=True)
            raise CronBootError(str(exc)) from None

    def after_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Start the leader thread (once per process, however often called),
        and hand the lease over the moment the process is told to stop
        (see shutdown.py)."""
        if self._simulator is not None or self._stub_without_redis(broker):
            return
        # Before the thread starts: a signal that comes the moment the
        # lease is won must already find the hand-over (it hands over
        # whatever leads then, nothing before the thread exists).  Once per
        # process, for every middleware of it (see shutdown.py).
        install()
        self.start(broker)

    def _stub_without_redis(self, broker: Broker) -> bool:
        """A ``StubBroker`` and no Redis configured: a test of the app, where
        nothing could be scheduled across processes anyway."""
        return isinstance(broker, StubBroker) and self.redis is None and url_from_environment() is None

    def before_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Stop the leader thread and release the lease, so a follower takes
        over in milliseconds instead of a lease."""
        self.stop()

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Close the connections of the worker threads, drained by now (run
        records, running marks)."""
        self.stop()
        close_clients(self._owned_by_workers)

    def start(self, broker: Broker) -> LeaderThread[HandOver] | None:
        """Start the leader thread if it is not running yet, and return it.
        It starts even with no declared schedule: runtime schedules may be
        added at any time, from any process.  In a process that may not
        lead (``lead=False``) it starts the ineligible watch instead and
        returns None."""
        with self._start_lock:
            if self.leader is not None and self.leader.is_alive():
                return self.leader
            if self.leader is not None and self.leader.hand_over is not None:
                self.leader.hand_over.close()  # of a leader thread that died: its connection goes with it
            if not self.config.eligible:
                self._start_watch(broker)
                return None
            schedules = self._declared_on(broker)
            client, blocking = self._clients(broker)
            timing = self.timing
            where = describe(client)
            clock = ServerClock(on_step=lambda step: self.logger.warning("%s", step.describe()))
            durability = Durability(replicas=self.config.replicas or 0, wait_ms=timing.replica_wait_ms)
            sentinels = sentinels_of(client, timeout_ms=timing.replica_wait_ms)
            if sentinels is not None:  # a replica's acknowledgement is not enough: see durability.py
                for sentinel in sentinels[0]:
                    self._own_one(sentinel)
                durability.sentinels = SentinelQuorum(sentinels[0], service=sentinels[1])
            lease = Lease(
                client=client,
                blocking_client=blocking,
                keys=self.keys,
                ttl_ms=self.lock_ttl,
                clock=clock,
                host=socket.gethostname(),
                pid=os.getpid(),
                fingerprint=fingerprint(schedules),
                version=self.config.version.replace("|", "/"),
                presence_client=(
                    self._own_one(presence_client(self.redis_source(broker), op_timeout_ms=self.timing.op_timeout_ms))
                    if self.config.fast_takeover
                    else None
                ),
                durability=durability,
            )
            ledger = Ledger(
                client=client, keys=self.keys, clock=clock, history_length=self.history_length, durability=durability
            )
            # The signal path releases on a connection of its own, outside
            # any pool: the leader thread may be mid-command on the pooled ones.
            shutdown_client = self._own(
                scheduler_clients(
                    self.redis_source(broker),
                    op_timeout_ms=min(timing.op_timeout_ms, Timing.HAND_OVER_ATTEMPT_MS),
                    block_timeout_ms=0,
                )
            )[0]
            # The scheduler's client and the broker's: the same server means
            # the claim script can enqueue in the same atomic step.
            broker_client = getattr(broker, "client", None)
            mode = boundary_for(broker, lease_client=client, same_server=same_server(client, broker_client))
            boundary = BrokerBoundary(broker, mode, keys=self.keys, mark_ms=self._mark_ms())
            shutdown_connection = dedicated_connection(shutdown_client, self.keys.lease)
            monitoring = self._monitoring_for(client, blocking)
            self.leader = LeaderThread(
                store=RedisStore(
                    lease=lease,
                    ledger=ledger,
                    runtime=self._runtime_store(client, broker),
                ),
                boundary=boundary,
                schedules=schedules,
                timing=timing,
                logger=self.logger,
                observer=HealthObserver(monitoring.monitor, self._observer),
                fast_takeover_ms=self.config.fast_takeover if lease.presence_client is not None else None,
                identify_server=lambda: identify(client),
                boot_check=lambda: self._boot_check(client, durability, where=where),
                declared_actors=lambda name: name in broker.actors,
                hand_over=lambda leader: register(HandOver(leader=leader, connection=shutdown_connection)),
                one_shot_retention_ms=self.config.one_shot_retention,
            )
            started = (
                f"Cron scheduler started on {where} (lease {self.lock_ttl} ms, enqueue "
                f"{mode.value.replace('_', ' ')}): {len(schedules)} declared schedule(s)"
            )
            # The runtime count is read off the main thread: a worker's boot
            # never waits on Redis for a log line.
            table = schedule_table(schedules)
            threading.Thread(
                target=lambda: self.logger.info(
                    "%s, %s runtime schedule(s)%s", started, _runtime_count(client, self.keys), table
                ),
                name="cron-start-log",
                daemon=True,
            ).start()
            self.leader.start()
            if self._monitoring is not None:  # of a leader thread that died
                self._monitoring.stop(0)
            monitoring.start()
            self._monitoring = monitoring
            return self.leader

    def _declared_on(self, broker: Broker) -> list[BoundSchedule]:
        """The declared schedules whose actor the broker still has, as the
        runtime ones are checked: an actor removed from ``broker.actors``
        after it was declared (a test fixture that clears them, as
        django_dramatiq's does) would only send messages the worker moves to
        the dead-letter queue, one ERROR each.  One WARNING names those
        skipped."""
        schedules = self.all_schedules()
        missing = sorted({s.actor_name for s in schedules if s.actor_name not in broker.actors})
        if missing:
            self.logger.warning(
                "Declared cron schedules of %d actor(s) not on the broker any more are skipped: %s "
                "(removed from broker.actors after they were declared); they fire again once declared again",
                len(missing),
                ", ".join(shown(name) for name in missing[:10]) + (", ..." if len(missing) > 10 else ""),
            )
        return [s for s in schedules if s.actor_name in broker.actors]

    def _start_watch(self, broker: Broker) -> None:
        """In a process that may not lead: start the thread that says it is
        alive and warns when nobody may lead (once)."""
        if self._watch is not None and self._watch.is_alive():
            return
        client, _ = self._clients(broker)
        self._watch = IneligibleWatch(client=client, keys=self.keys, timing=self.timing, logger=self.logger)
        self.logger.info(
            "Cron scheduler: this process is not eligible to lead (lead=False or %s=0); it never takes the lease.",
            ENV_LEAD,
        )
        self._watch.start()

    def _monitoring_for(self, client: Redis, blocking: Redis) -> MonitorThreads:
        """Run monitoring's threads for the leader about to start: health
        decided and alerts delivered while this process leads."""

        def subject(schedule_id: str) -> tuple[str, str | None, Policy]:
            leader = self.leader
            return self.health_subject(schedule_id, leader.queue.schedules.get(schedule_id) if leader else None)

        def token() -> str | None:
            leader = self.leader
            leadership = leader.leadership if leader is not None else None
            return None if leadership is None else leadership.token

        return monitor_threads(
            runs=self._redis_runs(client, blocking),
            config=self.monitor_config,
            subject=subject,
            token=token,
            timing=self.timing,
            logger=self.logger,
            on_health=getattr(self._observer, "health_decided", None),
        )

    def _boot_check(self, client: Redis, durability: Durability, *, where: str) -> None:
        """At the first turn that reaches Redis, before any write: the
        eviction policy, and how many replicas must confirm a write."""
        check_eviction_policy(client, self.logger, where=where)
        if self.config.replicas is None:
            sentinel = isinstance(getattr(client, "connection_pool", None), SentinelConnectionPool)
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
        windows = [s.catch_up_window for s in self.all_schedules()] or [self.catch_up_window]
        return max(windows) + 600_000

    def _clients(self, broker: Broker) -> tuple[Redis, Redis]:
        """The scheduler's command and blocking clients, built (and the
        source parsed) once."""
        if self._built is None:
            self._built = self._own(
                scheduler_clients(
                    self.redis_source(broker),
                    op_timeout_ms=self.timing.op_timeout_ms,
                    block_timeout_ms=self.timing.block_timeout_ms,
                )
            )
        return self._built

    def _own(self, clients: tuple[Redis, Redis]) -> tuple[Redis, Redis]:
        """Note clients this middleware built, to close when it stops."""
        for client in clients:
            self._own_one(client)
        return clients

    def _own_one(self, client: Redis | None) -> Redis | None:
        if client is not None and all(client is not c for c in self._owned):
            self._owned.append(client)
        return client

    def _own_for_workers(self, clients: tuple[Redis, Redis]) -> tuple[Redis, Redis]:
        self._owned_by_workers.extend(clients)  # built once each (under the start lock)
        return clients

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the leader thread and release the lease if held, then close
        every connection this middleware opened but the worker threads'
        (closed at ``after_worker_shutdown``); a client used again, by the
        API or a next start, reconnects.  With the scheduler's Redis
        unresponsive this gives up within about two seconds, whatever the
        lease (see shutdown.py)."""
        with self._start_lock:
            leader, self.leader = self.leader, None
            watch, self._watch = self._watch, None
            monitoring, self._monitoring = self._monitoring, None
            recorder = self._recorder
        if recorder is not None:
            recorder.close()
        if watch is not None:
            watch.stop(timeout)
        if monitoring is not None:
            monitoring.stop(0)  # told first, waited for after the hand-over
        if leader is not None:
            leader.stop(timeout)
            if leader.hand_over is not None:
                leader.hand_over.close()
        if monitoring is not None:
            monitoring.join(0.1)
        # Closing also ends a thread still blocked on one of them (its
        # socket is shut down), so nothing outlives the stop for long.
        close_clients(self._owned)

    def redis_source(self, broker: Broker) -> Any:
        """Where the scheduler's Redis is, for ``broker``: the ``redis=``
        argument, else ``DRAMATIQ_CRON_REDIS_URL``, else the client of a
        ``RedisBroker`` (a URL or a redis-py client, for
        ``store.connection.scheduler_clients``).

        Raises:
          CronConfigurationError: none of the three is there.
        """
        if self.redis is not None:
            return self.redis
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

    # -- runtime schedules (store/runtime.py) ---------------------------------

    def after_declare_actor(self, broker: Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        """Remember the broker, which runtime schedules check actors against
        (also in a process that runs no worker, such as a web server)."""
        self._broker = broker

    def after_process_boot(self, broker: Broker) -> None:
        """Remember the broker (see :meth:`after_declare_actor`)."""
        self._broker = broker

    @property
    def runtime(self) -> RuntimeSchedules:
        """The runtime schedules in this scheduler's Redis, for the full API
        (``add_many``, ``get``, ``list``, and what the leader reads); while a
        ``testing.CronSimulator`` is attached, the simulator's (in memory).

        Raises:
          CronConfigurationError: no Redis is configured (on a StubBroker:
            attach a CronSimulator), or no actor was declared on the
            middleware's broker yet.
        """
        if self._simulator is not None:
            # The simulator's in-memory store answers the same calls.
            return cast(RuntimeSchedules, self._simulator.runtime)
        with self._runtime_lock:
            if self._runtime is None:
                broker = self._broker
                if broker is None:
                    raise CronConfigurationError(
                        "CronMiddleware: runtime schedules need the broker: add the middleware to it and declare "
                        "actors (import their modules) first"
                    )
                if self._stub_without_redis(broker):
                    raise CronConfigurationError(
                        "CronMiddleware: runtime schedules need Redis, and the broker is a StubBroker with none "
                        "configured: in tests, attach a dramatiq_cron_middleware.testing.CronSimulator to the "
                        f"broker (the calls then go to it); otherwise pass CronMiddleware(redis='redis://...') or set "
                        f"{ENV_URL}"
                    )
                client, _ = self._own(
                    scheduler_clients(
                        self.redis_source(broker), op_timeout_ms=Timing.OPERATOR_TIMEOUT_MS, block_timeout_ms=0
                    )
                )
                self._runtime = self._runtime_store(client, broker)
            return self._runtime

    # -- the Python API: runtime schedules, pause, resume, trigger --------------
    #
    # Every change is recorded in the history as done by ``who`` (the audit
    # trail, audit.py) and logged at INFO here.  The ``dramatiq-cron``
    # command calls these with who="cli", the dashboard with its user.

    def get(self, schedule_id: str) -> RuntimeSchedule | None:
        """The runtime schedule with this id (``actor:name``), or None.

        Raises:
          CronScheduleError: not a runtime schedule's id.
          CronUnavailableError: Redis did not answer.
        """
        actor, name = split_id(schedule_id)
        return self.runtime.get(actor, name)

    def add(
        self,
        actor: Any,
        schedule: str | Schedule | None = None,
        *,
        name: str,
        at: int | dt.datetime | None = None,
        description: str | None = None,
        replace: bool = True,
        who: str = "api",
    ) -> RuntimeSchedule:
        """Create a runtime schedule of a declared actor, checked by the same
        rules as ``cron=``; with ``replace`` (the default) replace a stored
        one of that name with the whole new definition (see :meth:`update`
        to change a few options and keep the rest).

        Parameters:
          actor(Actor|str): The actor, or its name.
          schedule(str|Schedule): A cron expression or a :class:`Schedule`.
            Defaults to None: then ``at`` is required.
          name(str): Unique among the actor's runtime schedules (1 to 64 of
            ``A-Z a-z 0-9 _ . -``).
          replace(bool): Whether a stored schedule of that name is replaced.
            Defaults to True, which is what ``add`` always did: code that
            adds the same schedule at every start, or retries after a lost
            reply, keeps working.  False creates only: an existing name is
            refused (CronScheduleError), nothing written.
          who(str): Who acts, recorded in the history.  Defaults to "api".
          at(datetime|int): A one-shot: fire once at this instant (an aware
            datetime or epoch ms), which must be after Redis's time.  Once
            decided it shows as done and is removed after
            ``one_shot_retention`` ms.  Defaults to None.
          description(str): What it is for (up to 500 characters), with
            ``at`` or a plain expression.  Defaults to None.

        Returns:
          RuntimeSchedule: what was stored, with its revision (1 for a new
          schedule) and next fire time (``next_ms``, ``next_at``).

        Raises:
          CronScheduleError: a bad value, named.
          CronUnavailableError: Redis did not answer (nothing half-written).
        """
        if at is not None or schedule is None:
            if schedule is not None:
                raise CronScheduleError(
                    f"runtime schedule {name!r}: give a schedule or at=, not both (got {schedule!r} and at={at!r})"
                )
            if at is None:
                raise CronScheduleError(f"runtime schedule {name!r}: give a schedule (an expression) or at=")
            schedule = Schedule(at=at, description=description)
        elif description is not None:
            if not isinstance(schedule, str):
                raise CronScheduleError(
                    f"runtime schedule {name!r}: give description= inside the Schedule, not beside it"
                )
            schedule = Schedule(schedule, description=description)
        return self.add_many([(actor, schedule, name)], replace=replace, who=who)[0]

    def add_many(
        self, items: Iterable[tuple[Any, str | Schedule, str]], *, replace: bool = True, who: str = "api"
    ) -> builtins.list[RuntimeSchedule]:
        """Create (or, with ``replace``, replace) many runtime schedules,
        ``(actor, schedule, name)`` each, as :meth:`add`; every item is
        checked before anything is written.  See
        :meth:`RuntimeSchedules.add_many`."""
        check_who(who)
        stored = self.runtime.add_many(items, replace=replace)
        self._record(Action.ADD, who, [(s.id, _added_detail(s)) for s in stored])
        return stored

    def update(self, schedule_id: str, *, who: str = "api", **changes: Any) -> RuntimeSchedule:
        """Change some options of a runtime schedule and keep the others
        (arguments, zone, message options...): any :class:`Schedule`
        option by keyword, e.g. ``update("report:tenant-42",
        expression="0 10 * * *")``.  An ``expression`` replaces an interval
        and ``every`` an expression.  Its revision grows by one.

        Raises:
          CronScheduleError: no such schedule, or a bad or unknown option
            (named); nothing is written.
          CronUnavailableError: Redis did not answer.
        """
        check_who(who)
        before, after = self.runtime.update(schedule_id, changes)
        self._record(Action.UPDATE, who, [(after.id, describe_changes(before, after))])
        return after

    def backfill(
        self,
        target: Any,
        *,
        start: Any,
        end: Any,
        include_fired: bool = False,
        dry_run: bool = False,
        max_ticks: int | None = 10_000,
    ) -> BackfillPlan | BackfillReport:
        """Enqueue each tick of one schedule in ``[start, end)`` once, marked
        as a backfill (the ``cron_backfill`` message option), through the
        broker's ``enqueue`` (its hooks run as for any tick); recorded
        ``backfilled`` in the history.  Two backfills of the same range, or
        one run again after an interruption, enqueue each tick once.  Ticks
        the ledger or the history shows as fired, caught up, triggered or
        backfilled are left out unless ``include_fired``; ticks after the
        schedule's last decided tick are the leader's.

        Parameters:
          target(str): A schedule id, or an actor with one schedule.
          start, end(datetime|int|str): The range, as aware datetimes,
            epoch ms or ISO 8601 text with offsets; ``end`` exclusive.
          include_fired(bool): Enqueue ticks that fired already too.
            Defaults to False.
          dry_run(bool): Only plan: return the :class:`BackfillPlan`.
            Defaults to False.
          max_ticks(int): Refuse a range holding more ticks than this
            (None: no limit).  Defaults to 10000.

        Returns:
          BackfillReport (or BackfillPlan with ``dry_run``).

        Raises:
          CronScheduleError: an unknown target, a reversed range, a start
            after Redis's time, or too many ticks, named.
        """
        from .ops.backfill import Backfill, instant_ms
        from .ops.control import Control

        if self._simulator is not None:
            raise CronConfigurationError(
                "CronMiddleware: backfill acts on Redis; under a CronSimulator advance its clock instead"
            )
        resolved = self._target(target, None, resuming=False)
        runtime = self.runtime
        control = Control(client=runtime.client, keys=self.keys, history_length=self.history_length)
        if resolved.schedule is None:
            raise CronScheduleError(f"backfill takes one schedule, got {resolved}")
        backfill = Backfill(control, prefix=self.prefix)
        plan = backfill.plan(
            resolved.schedule,
            start_ms=instant_ms(start, what=f"backfill of {resolved} start"),
            end_ms=instant_ms(end, what=f"backfill of {resolved} end"),
            include_fired=include_fired,
            max_ticks=max_ticks,
        )
        if dry_run:
            return backfill.listed(plan)
        broker = self._broker
        assert broker is not None  # self.runtime needed it
        return backfill.run(broker, plan)

    def remove(self, actor: Any, name: str | None = None, *, who: str = "api") -> bool:
        """Remove a runtime schedule, by id (``remove("report:tenant-42")``)
        or by actor and name (``remove(send_report, "tenant-42")``); it
        never fires after this returns.  See :meth:`RuntimeSchedules.remove`.

        Returns:
          bool: False if there was no such schedule.

        Raises:
          CronScheduleError: a bad id, actor or name.
          CronUnavailableError: Redis did not answer (nothing half-written).
        """
        check_who(who)
        if name is None:
            actor, name = split_id(actor)
        removed = self.runtime.remove(actor, name)
        if removed:
            self._record(Action.REMOVE, who, [(f"{getattr(actor, 'actor_name', actor)}:{name}", "")])
        return removed

    def list(
        self, *, actor: Any = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        """One page of runtime schedules, in order of their ids; see
        :meth:`RuntimeSchedules.list` (:meth:`all_schedules` lists the
        declared ones).

        Parameters:
          actor(Actor|str): Only this actor's.  Defaults to None, meaning all.
          search(str): Only ids (``actor:name``) containing this, ignoring
            case.  Defaults to None.
          cursor(str): The previous page's ``cursor``.  Defaults to None,
            meaning the first page.
          limit(int): At most this many (1 to 10000).  Defaults to 100.

        Returns:
          RuntimePage: ``items``, ``cursor`` (None on the last page), ``total``.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        return self.runtime.list(actor=actor, search=search, cursor=cursor, limit=limit)

    def list_runtime(
        self, *, actor: Any = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        """Deprecated: the same as :meth:`list`."""
        warnings.warn("CronMiddleware.list_runtime() is deprecated: use list()", DeprecationWarning, stacklevel=2)
        return self.list(actor=actor, search=search, cursor=cursor, limit=limit)

    def pause(
        self,
        schedule_id: str | None = None,
        *,
        actor: str | None = None,
        until: Any = None,
        duration: Any = None,
        who: str = "api",
    ) -> Changed:
        """Pause one schedule (declared or runtime, by id), or with
        ``actor=`` every schedule of an actor: whichever process leads
        records their ticks as ``paused`` and enqueues nothing.

        Parameters:
          until(datetime|int|str): Resume by itself at this instant (an
            aware datetime, epoch ms or ISO 8601 text with its offset): the
            leader fires ticks from it on, under its lease, whether or not
            the pausing process is alive.  Defaults to None.
          duration(int|str): Or resume by itself after this long (ms, or a
            text like ``"2h"``, ``"90m"``).  Defaults to None; with neither,
            the pause lasts until :meth:`resume`.

        Returns:
          Changed: ``changed`` is False when it already was paused.

        Raises:
          CronScheduleError: no such schedule or actor (``UnknownTarget``).
          CronUnavailableError: Redis did not answer.
        """
        from .ops.control import pause_expiry

        target = self._target(schedule_id, actor, resuming=False)
        if self._simulator is not None:
            if until is not None or duration is not None:
                raise CronConfigurationError(
                    "CronMiddleware: a pause with an end acts on Redis; under a CronSimulator set "
                    "simulator.server.paused_until instead"
                )
            return self._simulated_pause(target.member, who=who, paused=True)
        with self._runtime_errors():
            audit = self._audit_log()
            try:
                until_ms = pause_expiry(audit.server_ms(), until=until, duration=duration)
            except ValueError as exc:
                raise CronScheduleError(f"cannot pause {target}: {exc}") from None
            return audit.pause(target.member, who=who, until_ms=until_ms)

    def resume(self, schedule_id: str | None = None, *, actor: str | None = None, who: str = "api") -> Changed:
        """Undo :meth:`pause` of the same schedule or actor (found even
        when the app no longer declares it)."""
        target = self._target(schedule_id, actor, resuming=True)
        if self._simulator is not None:
            return self._simulated_pause(target.member, who=who, paused=False)
        with self._runtime_errors():
            return self._audit_log().resume(target.member, who=who)

    def trigger(self, schedule_id: str, *, who: str = "api") -> Triggered:
        """Enqueue a schedule's message now (by id, declared or runtime),
        marked ``cron_manual`` with a fresh message id, and record it as
        ``triggered``; the schedule fires as before.

        Raises:
          CronScheduleError: no such schedule (``UnknownTarget``), or the
            trigger cannot work (``TriggerRefused``: a StubBroker).
          CronUnavailableError: Redis did not answer.
        """
        target = self._target(schedule_id, None, resuming=False)
        assert target.schedule is not None
        if self._simulator is not None:
            raise TriggerRefused("a CronSimulator is attached: advance its clock to fire ticks instead")
        with self._runtime_errors():
            return self._audit_log().trigger(self._known_broker(), target.schedule, prefix=self.prefix, who=who)

    def _target(self, schedule_id: str | None, actor: str | None, *, resuming: bool) -> Target:
        if (schedule_id is None) == (actor is None):
            raise CronScheduleError("give a schedule id or actor=, not both")
        paused: Any = ()
        with self._runtime_errors():
            if resuming:  # what is paused can be resumed, known or not
                simulator = self._simulator
                paused = (
                    simulator.server.paused
                    if simulator is not None
                    else self._audit_log().client.smembers(self.keys.paused)
                )
            return resolve_target(
                declared=self.all_schedules(),
                runtime=self.runtime,
                schedule_id=schedule_id,
                actor=actor,
                paused=paused,
            )

    def _simulated_pause(self, member: str, *, who: str, paused: bool) -> Changed:
        """Pause or resume in an attached ``testing.CronSimulator``'s store."""
        check_who(who)
        members: set[str] = self._simulator.server.paused
        changed = (member not in members) if paused else (member in members)
        if paused:
            members.add(member)
        else:
            members.discard(member)
        if changed:
            log_actions(self.logger, Action.PAUSE if paused else Action.RESUME, who, [(member, "")])
        return Changed(target=member, paused=paused, changed=changed, at_ms=int(self._simulator.now_ms))

    def _audit_log(self) -> AuditLog:
        runtime = self.runtime
        with self._runtime_lock:
            if self._audit is None or self._audit.client is not runtime.client:
                self._audit = AuditLog(client=runtime.client, keys=self.keys, history_length=self.history_length)
            return self._audit

    def _record(self, action: Action, who: str, entries: builtins.list[tuple[str, str]]) -> None:
        if not entries:
            return
        if self._simulator is not None:  # no Redis to record in: the log line only
            log_actions(self.logger, action, who, entries)
            return
        with self._runtime_errors():
            self._audit_log().record(action, who=who, entries=entries)

    @contextmanager
    def _runtime_errors(self) -> Iterator[None]:
        """Redis failures of an operator call as one clear exception, as the
        runtime schedules' own calls raise them."""
        try:
            yield
        except CronError:
            raise
        except redis.RedisError as exc:
            runtime = self._runtime
            where = describe(runtime.client) if runtime is not None and hasattr(runtime, "client") else "Redis"
            refused = credentials_refused(exc, where)
            if refused is not None:
                raise CronConfigurationError(refused) from None
            if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
                raise CronUnavailableError(f"Redis at {where} did not answer ({redact(str(exc))})") from None
            raise CronConfigurationError(f"Redis refused ({redact(str(exc))})") from None

    def _known_broker(self) -> Broker:
        if self._broker is None:
            raise CronConfigurationError("CronMiddleware: declare actors on the broker first")
        return self._broker

    @classmethod
    def of(cls, broker: Broker | None = None) -> CronMiddleware:
        """The middleware added to ``broker`` (by default dramatiq's global
        broker), for code that did not build it, such as a Django view::

            CronMiddleware.of().add(send_report, Schedule("0 9 * * mon", kwargs={"tenant_id": 42}), name="tenant-42")

        The same as :func:`find_middleware`.
        """
        return find_middleware(broker)

    def _runtime_store(self, client: Redis, broker: Broker) -> RuntimeSchedules:
        """The runtime schedules in Redis through ``client``, checked
        against ``broker``'s actors and defaulting to this configuration."""
        return RuntimeSchedules(
            client,
            self.keys,
            resolve_actor=lambda actor: self._runtime_actor(broker, actor),
            timezone=self.timezone,
            catch_up=self.catch_up,
            catch_up_window=self.catch_up_window,
            history_length=self.history_length,
        )

    @staticmethod
    def _runtime_actor(broker: Broker, actor: object) -> ActorInfo:
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
            time_limit=_time_limit(broker, declared),
            signature=actor_signature(declared.fn),
        )


def find_middleware(broker: Broker | None = None, *, needed_by: str | None = None) -> CronMiddleware:
    """The :class:`CronMiddleware` added to ``broker`` (by default
    dramatiq's global broker): the one way every integration finds it.

    Parameters:
      broker: The broker.  Defaults to None, meaning ``dramatiq.get_broker()``.
      needed_by(str): Who asks (``"CronMetrics"``), named in the error.
        Defaults to None.

    Raises:
      CronConfigurationError: the broker has no CronMiddleware.
    """
    broker = broker if broker is not None else dramatiq.get_broker()
    for middleware in broker.middleware:
        if isinstance(middleware, CronMiddleware):
            return middleware
    if needed_by is not None:
        raise CronConfigurationError(
            f"{needed_by} needs a CronMiddleware, and the broker ({type(broker).__name__}) has none"
        )
    raise CronConfigurationError(f"the broker ({type(broker).__name__}) has no CronMiddleware")


def _time_limit(broker: Broker, actor: dramatiq.Actor[Any, Any]) -> int:
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


def _added_detail(stored: RuntimeSchedule) -> str:
    """What an add recorded: the definition in brief."""
    s = stored.schedule
    return f"revision {stored.revision}: {s.expression} in {s.timezone}"


def _runtime_count(client: Redis, keys: Keys) -> str:
    """How many runtime schedules there are, for the start log."""
    try:
        return str(int(cast(Any, client.zcard(keys.runtime_ids))))
    except redis.RedisError:
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
