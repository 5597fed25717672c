"""The middleware: configuration, the ``cron`` actor option, and the hooks
that start and stop the leader thread in every worker process."""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import dramatiq
from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger

from .audit import Changed, Triggered
from .backfill import BackfillPlan, BackfillReport
from .config import CronConfig, CronOptions, check_options
from .errors import CronConfigurationError
from .leader.thread import LeaderObserver, LeaderThread
from .monitoring.config import RUNTIME_SLACK, MonitorConfig
from .monitoring.health import Policy
from .monitoring.recorder import RunRecorder, StoreSink
from .prefetch import requeue_prefetched
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
from .shutdown import HandOver
from .store.connection import Connections
from .store.keys import Keys
from .store.runtime import RuntimePage, RuntimeSchedule, RuntimeSchedules
from .store.timing import Timing
from .wiring import OnRedis, Parts, SchedulerOff, actor_info, redis_source, stub_without_redis, time_limit

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["CronConfig", "CronMiddleware", "actor_info", "find_middleware"]

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
        #: Told what the leader thread does (:meth:`observe_leader`).
        self.leader_observer: LeaderObserver | None = None
        self._lock = threading.Lock()
        self._recorder: RunRecorder | None = None
        #: Every Redis client this middleware makes (wiring.py): closed
        #: when it stops (each reconnects if used again); the worker
        #: threads' (run records, running marks) once the worker has
        #: drained, not under a message being processed.
        self._connections: Connections | None = None
        self._broker: Broker | None = None  # runtime schedules check actors against it
        self._given: Parts | None = None  # parts handed in (use_parts)
        self._on_redis: OnRedis | None = None
        self._off = SchedulerOff(self.logger)

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
            limit = time_limit(self._broker, actor) if actor is not None and self._broker is not None else None
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

    def use_parts(self, parts: Parts | None) -> None:
        """Run the hooks and the Python API on ``parts`` (a
        ``testing.CronSimulator``'s: its memory store, service and run
        records), or with None on this scheduler's Redis again."""
        self._given = parts

    def parts(self, broker: Broker | None = None) -> Parts:
        """What the hooks and the Python API run on (wiring.py): the parts
        handed in, else none on a ``StubBroker`` without Redis (the
        scheduler off), else this scheduler's Redis.

        Raises:
          CronConfigurationError: no broker is known yet.
        """
        if self._given is not None:
            return self._given
        broker = broker if broker is not None else self._broker
        if broker is None:
            raise CronConfigurationError(
                "CronMiddleware: runtime schedules need the broker: add the middleware to it and declare "
                "actors (import their modules) first"
            )
        if stub_without_redis(self.redis, broker):
            return self._off
        with self._lock:
            if self._on_redis is None:
                self._on_redis = OnRedis(self, broker)
            return self._on_redis

    def observe_leader(self, observer: LeaderObserver | None) -> None:
        """Tell ``observer`` what the leader thread started from now on does
        (``CronMetrics`` uses it)."""
        self.leader_observer = observer

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
            time_limit=time_limit(broker, actor),
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
        run records in the store (:meth:`parts`: Redis through a
        short-timeout worker client, a simulator's memory store, none on a
        StubBroker without Redis), and those ``CronMetrics`` and
        ``SentryCrons`` add."""
        with self._lock:
            if self._recorder is None:
                sink = StoreSink(store=lambda: self.parts(broker).run_store(), logger=self.logger)
                self._recorder = RunRecorder(logger=self.logger, sinks=[sink])
            return self._recorder

    def _clear_running_mark(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        schedule_id = message.options.get("cron_schedule")
        if message.options.get("cron_overlap") == "skip" and isinstance(schedule_id, str):
            self.parts(broker).clear_mark(schedule_id, message.message_id)

    def all_schedules(self) -> list[BoundSchedule]:
        """Every declared schedule, in declaration order."""
        return [s for schedules in self.schedules.values() for s in schedules]

    # -- worker life cycle (the parts: wiring.py) -------------------------------

    def before_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Resolve and parse the Redis connection, failing the boot with one
        clear error when none is configured or the URL is malformed.  On a
        ``StubBroker`` with no Redis configured (an app's own tests) the
        scheduler stays off instead, saying so once."""
        self.parts(broker).boot(broker)

    def after_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Start the leader thread (once per process, however often called),
        and hand the lease over the moment the process is told to stop
        (see shutdown.py)."""
        self.parts(broker).after_boot(broker)

    def before_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Stop the leader thread and release the lease, so a follower takes
        over in milliseconds instead of a lease."""
        self.stop()

    def before_consumer_thread_shutdown(self, broker: Broker, thread: Any) -> None:
        """Put the messages this consumer prefetched and never handed out
        back on their queue at once, not after the broker's heartbeat
        timeout (see prefetch.py)."""
        requeue_prefetched(thread, self.logger)

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Close the connections of the worker threads, drained by now (run
        records, running marks)."""
        self.stop()
        if self._connections is not None:
            self._connections.close_workers()

    @property
    def leader(self) -> LeaderThread[HandOver] | None:
        """This process's leader thread (None before the start, after the
        stop, and in a process that may not lead)."""
        return self._on_redis.leader if self._on_redis is not None else None

    def start(self, broker: Broker) -> LeaderThread[HandOver] | None:
        """Start the leader thread if it is not running yet, and return it.
        It starts even with no declared schedule: runtime schedules may be
        added at any time, from any process.  In a process that may not
        lead (``lead=False``) it starts the ineligible watch instead and
        returns None."""
        return self.parts(broker).start(broker)

    def connections(self, broker: Broker) -> Connections:
        """Every Redis client of this scheduler, built from
        :meth:`redis_source` (resolved once) in one place
        (``store.connection.Connections``)."""
        with self._lock:
            if self._connections is None:
                self._connections = Connections(self.redis_source(broker), timing=self.timing)
            return self._connections

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the leader thread and release the lease if held, then close
        every connection this middleware opened but the worker threads'
        (closed at ``after_worker_shutdown``); a client used again, by the
        API or a next start, reconnects.  With the scheduler's Redis
        unresponsive this gives up within about two seconds, whatever the
        lease (see shutdown.py)."""
        if self._recorder is not None:
            self._recorder.close()
        if self._on_redis is not None:
            self._on_redis.stop(timeout)
        # Closing also ends a thread still blocked on one of them (its
        # socket is shut down), so nothing outlives the stop for long.
        if self._connections is not None:
            self._connections.close()

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
        to: on this scheduler's Redis, or the parts handed in (a
        ``testing.CronSimulator``'s memory store).

        Raises:
          CronConfigurationError: as :attr:`runtime`.
        """
        return self.parts().service()

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

    @classmethod
    def of(cls, broker: Broker | None = None) -> CronMiddleware:
        """The middleware added to ``broker`` (by default dramatiq's global
        broker), for code that did not build it, such as a Django view::

            CronMiddleware.of().add(send_report, Schedule("0 9 * * mon", kwargs={"tenant_id": 42}), name="tenant-42")

        The same as :func:`find_middleware`.
        """
        return find_middleware(broker)


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
