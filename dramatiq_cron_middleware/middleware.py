"""The middleware: configuration, the ``cron`` actor option, and the hooks
that start and stop the leader thread in every worker process."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from typing import Any, cast

import dramatiq
from dramatiq import Broker, Middleware, Worker
from dramatiq.brokers.stub import StubBroker
from dramatiq.logging import get_logger
from dramatiq.middleware import TimeLimit
from redis import Redis
from redis.sentinel import SentinelConnectionPool

from .config import DEFAULT_CATCH_UP_WINDOW, DEFAULT_LOCK_TTL, CronConfig
from .errors import CronConfigurationError, CronScheduleError
from .leader.thread import LeaderObserver, LeaderThread
from .overlap import RunningMarks
from .schedules.schedule import (
    DEFAULT_TIME_LIMIT,
    BoundSchedule,
    CatchUp,
    Schedule,
    actor_signature,
    schedules_for_actor,
)
from .shutdown import HandOver, dedicated_connection, install
from .store.boundary import BrokerBoundary, boundary_for
from .store.clock import ServerClock
from .store.connection import (
    ENV_URL,
    describe,
    presence_client,
    same_server,
    scheduler_clients,
    url_from_environment,
)
from .store.durability import Durability, required_replicas
from .store.keys import Keys
from .store.lease import Lease
from .store.ledger import Ledger
from .store.redis_store import RedisStore
from .store.runtime import ActorInfo, RuntimePage, RuntimeSchedule, RuntimeSchedules
from .store.server_identity import check_eviction_policy, identify
from .store.timing import Timing

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
            replicas=replicas,
        )
        self.schedules: dict[str, list[BoundSchedule]] = {}
        self.leader: LeaderThread[HandOver] | None = None
        self._observer: LeaderObserver | None = None
        self._simulator: Any = None
        self._off_logged = False
        self._start_lock = threading.Lock()
        self._marks: RunningMarks | None = None
        self._built: tuple[Redis, Redis] | None = None
        self._hand_over_installed = False
        self._broker: Broker | None = None  # runtime schedules check actors against it
        self._runtime: RuntimeSchedules | None = None
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
        spec = actor.options.get("cron")
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

    # -- overlap="skip": the worker side --------------------------------------

    def after_process_message(
        self,
        broker: Broker,
        message: dramatiq.broker.MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Clear the running mark of a skip-overlap schedule once its
        message is done: succeeded, or failed for good (a retry keeps it)."""
        if exception is None or message.failed:
            self._clear_running_mark(broker, message)

    def after_skip_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Clear the running mark of a message that will not run (for
        example dropped by ``AgeLimit`` for its ``max_age``)."""
        self._clear_running_mark(broker, message)

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
                        client_factory=lambda: scheduler_clients(
                            self.redis_source(broker), op_timeout_ms=self.timing.op_timeout_ms, block_timeout_ms=0
                        )[0],
                        logger=self.logger,
                    )
        self._marks.clear(schedule_id, message.message_id)

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
        self._clients(broker)

    def after_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Start the leader thread (once per process, however often called),
        and hand the lease over the moment the process is told to stop
        (see shutdown.py)."""
        if self._simulator is not None or self._stub_without_redis(broker):
            return
        if self.start(broker) is not None and not self._hand_over_installed:
            self._hand_over_installed = True
            install(self._current_hand_over)

    def _stub_without_redis(self, broker: Broker) -> bool:
        """A ``StubBroker`` and no Redis configured: a test of the app, where
        nothing could be scheduled across processes anyway."""
        return isinstance(broker, StubBroker) and self.redis is None and url_from_environment() is None

    def _current_hand_over(self) -> HandOver | None:
        leader = self.leader  # one read: a signal handler calls this
        return None if leader is None else leader.hand_over

    def before_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Stop the leader thread and release the lease, so a follower takes
        over in milliseconds instead of a lease."""
        self.stop()

    def start(self, broker: Broker) -> LeaderThread[HandOver] | None:
        """Start the leader thread if it is not running yet, and return it.
        It starts even with no declared schedule: runtime schedules may be
        added at any time, from any process."""
        with self._start_lock:
            if self.leader is not None and self.leader.is_alive():
                return self.leader
            schedules = self.all_schedules()
            client, blocking = self._clients(broker)
            timing = self.timing
            where = describe(client)
            clock = ServerClock(on_step=lambda step: self.logger.warning("%s", step.describe()))
            durability = Durability(replicas=self.config.replicas or 0, wait_ms=timing.replica_wait_ms)
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
                    presence_client(self.redis_source(broker), op_timeout_ms=self.timing.op_timeout_ms)
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
            shutdown_client = scheduler_clients(
                self.redis_source(broker), op_timeout_ms=min(timing.op_timeout_ms, 500), block_timeout_ms=0
            )[0]
            # The scheduler's client and the broker's: the same server means
            # the claim script can enqueue in the same atomic step.
            broker_client = getattr(broker, "client", None)
            mode = boundary_for(broker, lease_client=client, same_server=same_server(client, broker_client))
            boundary = BrokerBoundary(broker, mode, keys=self.keys, mark_ms=self._mark_ms())
            shutdown_connection = dedicated_connection(shutdown_client, self.keys.lease)
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
                observer=self._observer,
                fast_takeover_ms=self.config.fast_takeover if lease.presence_client is not None else None,
                identify_server=lambda: identify(client),
                boot_check=lambda: self._boot_check(client, durability, where=where),
                declared_actors=lambda name: name in broker.actors,
                hand_over=lambda leader: HandOver(leader=leader, connection=shutdown_connection),
            )
            self.logger.info(
                "Cron scheduler started with %d schedule(s) on %s (lease %d ms, enqueue %s).",
                len(schedules),
                where,
                self.lock_ttl,
                mode.value.replace("_", " "),
            )
            self.leader.start()
            return self.leader

    def _boot_check(self, client: Redis, durability: Durability, *, where: str) -> None:
        """At the first turn that reaches Redis, before any write: the
        eviction policy, and how many replicas must confirm a write."""
        check_eviction_policy(client, self.logger, where=where)
        if self.config.replicas is None:
            sentinel = isinstance(getattr(client, "connection_pool", None), SentinelConnectionPool)
            durability.replicas = required_replicas(client, sentinel=sentinel, key=self.keys.lease)
        if durability.on:
            self.logger.info(
                "Cron claims and renewals wait for %d Redis replica(s) to acknowledge them (up to %d ms each); "
                "a granted message is enqueued only then.",
                durability.replicas,
                durability.wait_ms,
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
            self._built = scheduler_clients(
                self.redis_source(broker),
                op_timeout_ms=self.timing.op_timeout_ms,
                block_timeout_ms=self.timing.block_timeout_ms,
            )
        return self._built

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the leader thread and release the lease if held."""
        with self._start_lock:
            leader, self.leader = self.leader, None
        if leader is not None:
            leader.stop(timeout)
            if leader.hand_over is not None:
                leader.hand_over.close()

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
                client, _ = scheduler_clients(
                    self.redis_source(broker), op_timeout_ms=Timing.OPERATOR_TIMEOUT_MS, block_timeout_ms=0
                )
                self._runtime = self._runtime_store(client, broker)
            return self._runtime

    def add(self, actor: Any, schedule: str | Schedule, *, name: str) -> RuntimeSchedule:
        """Create or replace a runtime schedule of a declared actor, checked
        by the same rules as ``cron=``; see :meth:`RuntimeSchedules.add`.

        Parameters:
          actor(Actor|str): The actor, or its name.
          schedule(str|Schedule): A cron expression or a :class:`Schedule`.
          name(str): Unique among the actor's runtime schedules (1 to 64 of
            ``A-Z a-z 0-9 _ . -``).

        Returns:
          RuntimeSchedule: what was stored, with its next fire time.

        Raises:
          CronScheduleError: a bad value, named.
          CronUnavailableError: Redis did not answer (nothing half-written).
        """
        return self.runtime.add(actor, schedule, name=name)

    def remove(self, actor: Any, name: str) -> bool:
        """Remove a runtime schedule; it never fires after this returns.
        See :meth:`RuntimeSchedules.remove`.

        Parameters:
          actor(Actor|str): The actor, or its name (it need not be declared
            any more).
          name(str): The runtime schedule's name.

        Returns:
          bool: False if there was no such schedule.

        Raises:
          CronScheduleError: a bad actor or name.
          CronUnavailableError: Redis did not answer (nothing half-written).
        """
        return self.runtime.remove(actor, name)

    def list_runtime(
        self, *, actor: Any = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        """One page of runtime schedules, in order of their ids; see
        :meth:`RuntimeSchedules.list`.

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


def fingerprint(schedules: list[BoundSchedule]) -> str:
    """A short digest of a schedule set (identities and shapes): candidates
    with the same code have the same fingerprint."""
    text = "\n".join(sorted(f"{s.id}={s.shape}" for s in schedules))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]


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
