"""The middleware: configuration, the ``cron`` actor option, and the hooks
that start and stop the leader thread in every worker process."""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import functools
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import dramatiq
from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger
from dramatiq.middleware import TimeLimit
from redis import Redis

from .audit import Changed, Triggered
from .backfill import BackfillPlan, BackfillReport
from .config import CronConfig, CronOptions, check_options
from .errors import CronConfigurationError, CronScheduleError
from .leader.thread import LeaderObserver, LeaderThread
from .monitoring.config import (
    RUNTIME_SLACK,
    MonitorConfig,
)
from .monitoring.health import Policy
from .monitoring.recorder import RECORD_TIMEOUT_MS, RunRecorder, StoreSink
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
from .service import Cron
from .shutdown import HandOver, install
from .store.abc import RunStore
from .store.connection import (
    ENV_URL,
    Connections,
    close_clients,
    describe,
    scheduler_clients,
)
from .store.keys import Keys
from .store.operator import RedisOperator
from .store.running_marks import RunningMarks
from .store.runs import RedisRuns
from .store.runtime import (
    ActorInfo,
    RuntimePage,
    RuntimeSchedule,
    RuntimeSchedules,
)
from .store.timing import Timing
from .wiring import Running, Wiring, boot, redis_source, stub_without_redis

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["CronConfig", "CronMiddleware", "find_middleware"]

#: The keywords that are run monitoring's (``MonitorConfig``).
_MONITOR_OPTIONS = tuple(f.name for f in dataclasses.fields(MonitorConfig))


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

    Every keyword but ``redis`` is listed once, with its type, in
    :class:`~.config.CronOptions`; a misspelt one raises ``TypeError`` at
    once, naming it.
    """

    def __init__(self, *, redis: Any = None, **options: Unpack[CronOptions]) -> None:
        given: dict[str, Any] = dict(options)
        check_options(given)
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        #: The run monitoring arguments, checked.
        self.monitor_config = MonitorConfig(**{k: given.pop(k) for k in _MONITOR_OPTIONS if k in given})
        #: The checked arguments; read them through the properties below.
        self.config = CronConfig(redis=redis, **given)
        self.schedules: dict[str, list[BoundSchedule]] = {}
        self._running = Running()
        self._observer: LeaderObserver | None = None
        self._simulator: Any = None
        self._off_logged = False
        self._start_lock = threading.Lock()
        self._marks: RunningMarks | None = None
        self._recorder: RunRecorder | None = None
        #: Every Redis client this middleware makes (wiring.py): closed
        #: when it stops (each reconnects if used again); the worker
        #: threads' (run records, running marks) once the worker has
        #: drained, not under a message being processed.
        self._connections: Connections | None = None
        self._connections_lock = threading.Lock()
        # Clients still built outside connections() (the runtime API's, the
        # run records' and running marks'), closed with the rest.
        self._owned: list[Redis] = []
        self._owned_by_workers: list[Redis] = []
        self._broker: Broker | None = None  # runtime schedules check actors against it
        self._cron: Cron | None = None  # the operator service, built at first use
        # Not the start lock: a web request asking for the runtime schedules
        # need not wait for a leader thread starting.
        self._runtime_lock = threading.Lock()

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
        need no Redis), or no simulator again (None); the Python API then
        goes to its service (on its memory store)."""
        self._simulator = simulator
        self.use_service(None if simulator is None else simulator.cron)

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

    # -- worker life cycle (the parts: wiring.py) -------------------------------

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
        boot(self, broker)

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
        return stub_without_redis(self.redis, broker)

    def before_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Stop the leader thread and release the lease, so a follower takes
        over in milliseconds instead of a lease."""
        self.stop()

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Close the connections of the worker threads, drained by now (run
        records, running marks)."""
        self.stop()
        if self._connections is not None:
            self._connections.close_workers()
        close_clients(self._owned_by_workers)

    @property
    def leader(self) -> LeaderThread[HandOver] | None:
        """This process's leader thread (None before the start, after the
        stop, and in a process that may not lead)."""
        return self._running.leader

    def start(self, broker: Broker) -> LeaderThread[HandOver] | None:
        """Start the leader thread if it is not running yet, and return it.
        It starts even with no declared schedule: runtime schedules may be
        added at any time, from any process.  In a process that may not
        lead (``lead=False``) it starts the ineligible watch instead and
        returns None."""
        with self._start_lock:
            running = self._running
            if running.leader is not None and running.leader.is_alive():
                return running.leader
            running.retire()  # of a leader thread that died
            wiring = Wiring(self, broker)
            if not self.config.eligible:
                alive = running.watch is not None and running.watch.is_alive()
                self._running = Running(watch=running.watch if alive else wiring.watch())
                self._running.start()
                return None
            client, blocking = wiring.connections.scheduler()
            monitoring = self._monitoring_for(client, blocking)
            leader = wiring.leader(
                runtime=self._runtime_store(client, broker),
                observer=HealthObserver(monitoring.monitor, self._observer),
            )
            # Set before the threads start: monitoring reads self.leader.
            self._running = Running(leader=leader, monitoring=monitoring)
            self._running.start()
            return leader

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

    def connections(self, broker: Broker) -> Connections:
        """Every Redis client of this scheduler, built from
        :meth:`redis_source` (resolved once) in one place
        (``store.connection.Connections``)."""
        with self._connections_lock:
            if self._connections is None:
                self._connections = Connections(self.redis_source(broker), timing=self.timing)
            return self._connections

    def _own(self, clients: tuple[Redis, Redis]) -> tuple[Redis, Redis]:
        """Note clients built outside :meth:`connections`, to close when it stops."""
        self._owned.extend(clients)
        return clients

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
            running, self._running = self._running, Running()
            recorder = self._recorder
        if recorder is not None:
            recorder.close()
        running.stop(timeout)
        # Closing also ends a thread still blocked on one of them (its
        # socket is shut down), so nothing outlives the stop for long.
        if self._connections is not None:
            self._connections.close()
        close_clients(self._owned)

    def redis_source(self, broker: Broker) -> Any:
        """Where the scheduler's Redis is, for ``broker``: the ``redis=``
        argument, else ``DRAMATIQ_CRON_REDIS_URL``, else the client of a
        ``RedisBroker`` (a URL or a redis-py client, for
        ``store.connection.scheduler_clients``).

        Raises:
          CronConfigurationError: none of the three is there.
        """
        return redis_source(self.redis, broker)

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
        """The runtime schedules in this scheduler's store, for the full API
        (``add_many``, ``get``, ``list``, and what the leader reads): the
        service's (:attr:`service`).

        Raises:
          CronConfigurationError: no Redis is configured (on a StubBroker:
            attach a CronSimulator), or no actor was declared on the
            middleware's broker yet.
        """
        return cast(RuntimeSchedules, self.service.runtime)  # in memory: a subclass

    @property
    def service(self) -> Cron:
        """The operator service (service.py) every action below delegates
        to: built at first use on this scheduler's Redis, or the one a
        ``testing.CronSimulator`` attached (on its memory store).

        Raises:
          CronConfigurationError: as :attr:`runtime`.
        """
        with self._runtime_lock:
            if self._cron is None:
                self._cron = self._redis_service()
            return self._cron

    def use_service(self, service: Cron | None) -> None:
        """Delegate the Python API to ``service`` (a simulator's), or with
        None to this scheduler's Redis again."""
        self._cron = service

    def _redis_service(self) -> Cron:
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
        source = self.redis_source(broker)
        client, _ = self._own(scheduler_clients(source, op_timeout_ms=Timing.OPERATOR_TIMEOUT_MS, block_timeout_ms=0))
        store = RedisOperator(client=client, keys=self.keys, history_length=self.history_length)
        return Cron(
            store=store,
            runtime=self._runtime_store(client, broker),
            declared=self.all_schedules,
            broker=self._known_broker,
            prefix=self.prefix,
            where=describe(client),
        )

    # -- the Python API: runtime schedules, pause, resume, trigger, backfill -------
    #
    # One line each over the service (service.py): every change is recorded
    # in the history as done by ``who`` (the audit trail, audit.py).

    def get(self, schedule_id: str) -> RuntimeSchedule | None:
        """The runtime schedule with this id (``actor:name``), or None.

        Raises:
          CronScheduleError: not a runtime schedule's id.
          CronUnavailableError: Redis did not answer.
        """
        return self.service.get(schedule_id)

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
        return self.service.add(actor, schedule, name=name, at=at, description=description, replace=replace, who=who)

    def add_many(
        self, items: Iterable[tuple[Any, str | Schedule, str]], *, replace: bool = True, who: str = "api"
    ) -> builtins.list[RuntimeSchedule]:
        """Create (or, with ``replace``, replace) many runtime schedules,
        ``(actor, schedule, name)`` each, as :meth:`add`; every item is
        checked before anything is written.  See
        :meth:`RuntimeSchedules.add_many`."""
        return self.service.add_many(items, replace=replace, who=who)

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
        return self.service.update(schedule_id, who=who, **changes)

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
        return self.service.backfill(
            target, start=start, end=end, include_fired=include_fired, dry_run=dry_run, max_ticks=max_ticks
        )

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
        return self.service.remove(actor, name, who=who)

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
        return self.service.list(actor=actor, search=search, cursor=cursor, limit=limit)

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
        return self.service.pause(schedule_id, actor=actor, until=until, duration=duration, who=who)

    def resume(self, schedule_id: str | None = None, *, actor: str | None = None, who: str = "api") -> Changed:
        """Undo :meth:`pause` of the same schedule or actor (found even
        when the app no longer declares it)."""
        return self.service.resume(schedule_id, actor=actor, who=who)

    def trigger(self, schedule_id: str, *, who: str = "api") -> Triggered:
        """Enqueue a schedule's message now (by id, declared or runtime),
        marked ``cron_manual`` with a fresh message id, and record it as
        ``triggered``; the schedule fires as before.

        Raises:
          CronScheduleError: no such schedule (``UnknownTarget``), or the
            trigger cannot work (``TriggerRefused``: a StubBroker).
          CronUnavailableError: Redis did not answer.
        """
        return self.service.trigger(schedule_id, who=who)

    def _runtime_store(self, client: Redis, broker: Broker) -> RuntimeSchedules:
        """The runtime schedules in Redis through ``client``, checked
        against ``broker``'s actors and defaulting to this configuration."""
        return RuntimeSchedules(
            client,
            self.keys,
            resolve_actor=lambda actor: actor_info(broker, actor),
            timezone=self.timezone,
            catch_up=self.catch_up,
            catch_up_window=self.catch_up_window,
            history_length=self.history_length,
        )

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
