"""The one service over a scheduler's store: every operator action and
read, written once, for the Python API (``CronMiddleware`` delegates to
it), the ``dramatiq-cron`` command, the dashboard and the simulator alike.

It speaks only the store protocol (store/abc.py's ``OperatorStore`` and
the runtime definitions), so it runs the same on Redis and in memory; it
resolves what an operator names (targets.py, over the one schedule-id
grammar of schedules/ids.py) and translates the store's failures into the
package's errors in one place (:meth:`Cron.errors`).
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import redis
from dramatiq import Broker
from dramatiq.brokers.stub import StubBroker

from .audit import Action, AuditLog, Changed, Triggered, TriggerRefused, check_who
from .backfill import Backfill, BackfillPlan, BackfillReport, instant_ms
from .errors import CronConfigurationError, CronError, CronScheduleError, CronUnavailableError
from .monitoring.health import Policy
from .monitoring.read import HealthApp
from .monitoring.records import RunRecord, parse_run
from .schedules.instants import pause_expiry
from .schedules.schedule import BoundSchedule, Schedule
from .status import Health, Status, StatusReads, read_every_health, read_status
from .store.abc import OperatorStore, RuntimeDefinitions
from .store.connection import credentials_refused, redact
from .store.health_reads import HealthReads
from .store.operator import HistoryEntry, HistoryPage, LastDecision, ReplicasLacking, replicas_lacking
from .store.runtime import RuntimePage, RuntimeSchedule, as_schedule, changed_schedule, describe_changes, split_id
from .targets import Target, UnknownTarget, resolve_target

__all__ = ["CRONTAB_LOCK", "Cron", "OldLock"]

#: dramatiq-crontab's lock key (a redis-py ``Lock``: the holder's token,
#: a 10 s TTL that a live scheduler extends every 5 s).
CRONTAB_LOCK = "dramatiq-scheduler"
#: How long :meth:`Cron.crontab_lock` watches the lock for a renewal: one
#: of dramatiq-crontab's refresh intervals (5 s) and a second.
CRONTAB_WATCH_MS = 6_000
#: How much more than its countdown a PTTL may read and still be unrenewed
#: (two round trips).
RENEWAL_SLACK_MS = 250


@dataclasses.dataclass(frozen=True)
class OldLock:
    """Another scheduler's lock as :meth:`Cron.crontab_lock` found it: its
    key, holder (None: gone), PTTL in ms (-1: no expiry, -2: gone), whether
    it was renewed while watched (None: not watched), and whether it was
    deleted."""

    key: str
    holder: str | None
    pttl_ms: int
    renewed: bool | None
    deleted: bool


class Cron:
    """Operator actions and reads on one scheduler.

    Parameters:
      store: The store's operator half (pauses, history, audit, backfill).
      runtime: The runtime schedule definitions on the same store.
      declared: The app's declared schedules (called at each use).
      broker: The app's broker (called when a message is enqueued).
      prefix: The scheduler's key prefix (message ids derive from it).
      where: The store, as errors name it.
      in_process: Whether a ``StubBroker``'s messages reach a worker here
        (a simulator's broker); otherwise a trigger on one is refused, its
        message would only live in this process.  Defaults to False.
    """

    def __init__(
        self,
        *,
        store: OperatorStore,
        runtime: RuntimeDefinitions,
        declared: Callable[[], builtins.list[BoundSchedule]],
        broker: Callable[[], Broker],
        prefix: str,
        where: str = "Redis",
        in_process: bool = False,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.declared = declared
        self.broker = broker
        self.prefix = prefix
        self.where = where
        self.in_process = in_process
        self.audit = AuditLog(store=store)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """The store's failures as the package's errors: unreachable ->
        :class:`CronUnavailableError`, refused -> :class:`CronConfigurationError`."""
        try:
            yield
        except CronError:
            raise
        except redis.RedisError as exc:
            refused = credentials_refused(exc, self.where)
            if refused is not None:
                raise CronConfigurationError(refused) from None
            if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
                raise CronUnavailableError(f"Redis at {self.where} did not answer ({redact(str(exc))})") from None
            raise CronConfigurationError(f"Redis refused ({redact(str(exc))})") from None
        except (ConnectionError, TimeoutError) as exc:
            raise CronUnavailableError(f"{self.where} did not answer ({exc})") from None

    # -- targets ------------------------------------------------------------------

    def target(
        self,
        schedule_id: str | None = None,
        *,
        name: str | None = None,
        actor: str | None = None,
        resuming: bool = False,
    ) -> Target:
        """What an operator names: exactly one of ``schedule_id``, ``name``
        (an id, else an actor with one schedule) or ``actor`` (all of its
        schedules); see :func:`~.targets.resolve_target`.  With
        ``resuming``, whatever is paused is found, known or not."""
        if [schedule_id, name, actor].count(None) != 2:
            raise CronScheduleError("give a schedule id or actor=, not both")
        with self.errors():
            paused: Collection[str] = self.store.paused() if resuming else ()
            return resolve_target(
                declared=self.declared(),
                runtime=self.runtime,
                schedule_id=schedule_id,
                name=name,
                actor=actor,
                paused=paused,
            )

    # -- runtime schedules ----------------------------------------------------------

    def get(self, schedule_id: str) -> RuntimeSchedule | None:
        """The runtime schedule with this id (``actor:name``), or None."""
        actor, name = split_id(schedule_id)
        with self.errors():
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
        """Create (or replace) a runtime schedule; see ``CronMiddleware.add``."""
        return self.add_many([(actor, _requested(name, schedule, at, description), name)], replace=replace, who=who)[0]

    def add_many(
        self, items: Iterable[tuple[Any, str | Schedule, str]], *, replace: bool = True, who: str = "api"
    ) -> builtins.list[RuntimeSchedule]:
        """Create (or replace) many runtime schedules, each checked first."""
        check_who(who)
        with self.errors():
            stored = self.runtime.add_many(items, replace=replace)
            self._record(Action.ADD, who, [(s.id, _added_detail(s)) for s in stored])
        return stored

    def update(self, schedule_id: str, *, who: str = "api", **changes: Any) -> RuntimeSchedule:
        """Change some options of a runtime schedule, keeping the others."""
        check_who(who)
        with self.errors():
            before, after = self.runtime.update(schedule_id, changes)
            self._record(Action.UPDATE, who, [(after.id, describe_changes(before, after))])
        return after

    def remove(self, actor: Any, name: str | None = None, *, who: str = "api", detail: str = "") -> bool:
        """Remove a runtime schedule, by id or by actor and name; False if there was none."""
        check_who(who)
        if name is None:
            actor, name = split_id(actor)
        with self.errors():
            removed = self.runtime.remove(actor, name)
            if removed:
                self._record(Action.REMOVE, who, [(f"{getattr(actor, 'actor_name', actor)}:{name}", detail)])
        return removed

    def rename(
        self, before: RuntimeSchedule, schedule: Schedule, *, actor: str, name: str, who: str
    ) -> RuntimeSchedule:
        """Store ``schedule`` as ``actor:name`` and remove ``before`` (a
        rename: one added, one removed, each recorded as such)."""
        check_who(who)
        with self.errors():
            (stored,) = self.runtime.add_many([(actor, schedule, name)])
            self.runtime.remove(before.actor_name, before.name)
            change = describe_changes(before, stored)
            self._record(Action.ADD, who, [(stored.id, f"renamed from {before.id}; {change}")])
            self._record(Action.REMOVE, who, [(before.id, f"renamed to {stored.id}")])
        return stored

    def list(
        self, *, actor: Any = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        """One page of runtime schedules, in order of their ids."""
        with self.errors():
            return self.runtime.list(actor=actor, search=search, cursor=cursor, limit=limit)

    def _record(self, action: Action, who: str, entries: builtins.list[tuple[str, str]]) -> None:
        if entries:
            self.audit.record(action, who=who, entries=entries)

    # -- pause, resume, trigger ------------------------------------------------------

    def pause(
        self,
        schedule_id: str | None = None,
        *,
        actor: str | None = None,
        until: Any = None,
        duration: Any = None,
        who: str = "api",
        target: Target | None = None,
    ) -> Changed:
        """Pause a schedule or (``actor=``) a whole actor, until resumed, or
        until ``until`` / for ``duration``; see ``CronMiddleware.pause``."""
        target = target or self.target(schedule_id, actor=actor)
        with self.errors():
            try:
                until_ms = pause_expiry(self.store.server_ms(), until=until, duration=duration)
            except ValueError as exc:
                raise CronScheduleError(f"cannot pause {target}: {exc}") from None
            return self.audit.pause(target.member, who=who, until_ms=until_ms)

    def resume(
        self,
        schedule_id: str | None = None,
        *,
        actor: str | None = None,
        who: str = "api",
        target: Target | None = None,
    ) -> Changed:
        """Undo a pause of the same schedule or actor (found even when unknown)."""
        target = target or self.target(schedule_id, actor=actor, resuming=True)
        with self.errors():
            return self.audit.resume(target.member, who=who)

    def paused(self) -> set[str]:
        """The live paused members (schedule ids, ``<actor>:*``)."""
        with self.errors():
            return self.store.paused()

    def trigger(self, schedule_id: str | None = None, *, who: str = "api", target: Target | None = None) -> Triggered:
        """Enqueue a schedule's message now, marked manual, and record it."""
        target = target or self.target(schedule_id)
        if target.schedule is None:
            raise CronScheduleError(f"a trigger takes one schedule, got {target}")
        broker = self.broker()
        if isinstance(broker, StubBroker) and not self.in_process:
            raise TriggerRefused(
                "the app's broker is a StubBroker: a triggered message would only live in this process"
            )
        with self.errors():
            return self.audit.trigger(broker, target.schedule, prefix=self.prefix, who=who)

    # -- backfill ----------------------------------------------------------------------

    def backfill_plan(
        self, target: Target, *, start: Any, end: Any, include_fired: bool = False, max_ticks: int | None = 10_000
    ) -> BackfillPlan:
        """The plan of a backfill of one schedule in ``[start, end)``."""
        if target.schedule is None:
            raise CronScheduleError(f"backfill takes one schedule, got {target}")
        with self.errors():
            return Backfill(self.store, prefix=self.prefix).plan(
                target.schedule,
                start_ms=instant_ms(start, what=f"backfill of {target} start"),
                end_ms=instant_ms(end, what=f"backfill of {target} end"),
                include_fired=include_fired,
                max_ticks=max_ticks,
            )

    def backfill_listed(self, plan: BackfillPlan) -> BackfillPlan:
        """A plan with every tick listed (a dry run)."""
        with self.errors():
            return Backfill(self.store, prefix=self.prefix).listed(plan)

    def backfill_run(self, plan: BackfillPlan, *, progress: Callable[[int, int], None] | None = None) -> BackfillReport:
        """Claim, enqueue and settle a plan's ticks."""
        with self.errors():
            return Backfill(self.store, prefix=self.prefix).run(self.broker(), plan, progress=progress)

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
        """Plan and (unless ``dry_run``) run a backfill; see ``CronMiddleware.backfill``."""
        plan = self.backfill_plan(
            self.target(target), start=start, end=end, include_fired=include_fired, max_ticks=max_ticks
        )
        return self.backfill_listed(plan) if dry_run else self.backfill_run(plan)

    # -- reads ---------------------------------------------------------------------------

    def history(self, *, limit: int, match: set[str] | None = None) -> builtins.list[HistoryEntry]:
        """The newest ``limit`` history entries (of ``match``'s ids or actors), newest first."""
        with self.errors():
            return self.store.history(limit=limit, match=match)

    def schedule_history(self, schedule_id: str, *, limit: int, before: str | None = None) -> HistoryPage:
        """A page of one schedule's history, newest first."""
        with self.errors():
            return self.store.schedule_history(schedule_id, limit=limit, before=before)

    def runs(self, schedule_id: str, *, limit: int = 100) -> builtins.list[RunRecord]:
        """A schedule's newest recorded runs, newest first."""
        with self.errors():
            found = (parse_run(schedule_id, text) for text in self.store.run_records(schedule_id, limit=limit))
            return [run for run in found if run is not None]

    def find(self, schedule_id: str) -> BoundSchedule | None:
        """The schedule (declared, else runtime) with exactly this id, or None."""
        try:
            return self.target(schedule_id).schedule
        except UnknownTarget:
            return None

    def server_ms(self) -> int:
        """The store's time, epoch ms."""
        with self.errors():
            return self.store.server_ms()

    # -- the dashboard's reads (the store's errors as they are: a page says what failed) --

    def pauses(self) -> dict[str, int | None]:
        """The live pauses: member (a schedule id, ``<actor>:*``) -> when it ends, epoch ms (None: until resumed)."""
        return self.store.pauses()

    def decisions(self, schedule_ids: Sequence[str]) -> dict[str, LastDecision]:
        """The last decided tick of each of these schedules that has one."""
        return self.store.decisions(schedule_ids)

    def health(
        self, schedules: Iterable[BoundSchedule], *, now_ms: int, policy: Callable[[BoundSchedule], Policy]
    ) -> Health:
        """The health of every one of ``schedules`` at ``now_ms`` (``status.read_every_health``)."""
        return read_every_health(self.health_reads(), schedules, now_ms=now_ms, policy=policy)

    def status(self, app: HealthApp, *, declares: Callable[[str], bool], health: Health | None = None) -> Status:
        """The :class:`~.status.Status` now (``status.read_status``) of ``app``'s scheduler; ``health``: a kept read."""
        reads = cast(StatusReads, _StatusReads(self.store))
        runtime = self.runtime
        return read_status(
            reads, self.health_reads(), app, runtime=runtime, declares=declares, where=self.where, health=health
        )

    def health_reads(self) -> HealthReads:
        """The store's health reads (on Redis: its client and keys)."""
        client, keys = getattr(self.store, "client", None), getattr(self.store, "keys", None)
        if client is None or keys is None:
            raise CronConfigurationError(f"the store at {self.where} keeps no run health to read")
        return HealthReads(client, keys)

    def options(self, schedule: BoundSchedule) -> Schedule:
        """The :class:`Schedule` a stored runtime schedule binds from again, every option as stored."""
        return as_schedule(schedule)

    def changed(self, schedule: BoundSchedule, changes: Mapping[str, Any]) -> Schedule:
        """``schedule``'s :class:`Schedule` with ``changes`` applied, the others as stored (what ``update`` writes)."""
        return changed_schedule(schedule, changes)

    def redacted(self, text: str) -> str:
        """``text`` with the credentials of every URL in it hidden, for a log line."""
        return redact(text)

    def last_decisions(self) -> dict[str, LastDecision]:
        """Every schedule's last decided tick, by schedule id."""
        return self.store.last_decisions()

    def count_by_actor(self) -> dict[str, int]:
        """How many runtime schedules each actor has."""
        return self.runtime.count_by_actor()

    # -- migration -------------------------------------------------------------------------

    def crontab_lock(
        self, *, delete: bool = False, force: bool = False, watch_ms: int = CRONTAB_WATCH_MS, wait: Any = time.sleep
    ) -> OldLock:
        """dramatiq-crontab's lock (the key ``dramatiq-scheduler``) on this
        store: its holder and PTTL; whether it is still renewed (watched
        ``watch_ms`` when it expires: a ``crontab`` process still runs); and,
        with ``delete``, deleted if it was watched and not renewed (with
        ``force``, whatever it is)."""
        with self.errors():
            return _crontab_lock(self.store, delete=delete, force=force, watch_ms=watch_ms, wait=wait)


def _crontab_lock(store: OperatorStore, *, delete: bool, force: bool, watch_ms: int, wait: Any) -> OldLock:
    """:meth:`Cron.crontab_lock` on ``store``."""
    first, start = store.foreign_lock(CRONTAB_LOCK), store.server_ms()
    last, renewed = first, None
    if first.holder is not None and first.pttl_ms > 0 and watch_ms > 0:
        wait(watch_ms / 1000)
        last = store.foreign_lock(CRONTAB_LOCK)
        expected = first.pttl_ms - (store.server_ms() - start)  # counted down, unrenewed
        renewed = last.holder is not None and (
            last.holder != first.holder or last.pttl_ms > expected + RENEWAL_SLACK_MS
        )
    if delete and last.holder is not None and (force or renewed is False):
        last = store.foreign_lock(CRONTAB_LOCK, delete_if=last.holder)
    return OldLock(CRONTAB_LOCK, last.holder, last.pttl_ms, renewed, last.deleted)


class _StatusReads:
    """The store as ``status.StatusReads`` read it: its own reads, and the replicas record parsed."""

    def __init__(self, store: OperatorStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def replicas_lacking(self) -> ReplicasLacking | None:
        return replicas_lacking(self.store.replicas_record())


def _requested(name: str, schedule: str | Schedule | None, at: Any, description: str | None) -> str | Schedule:
    """The schedule :meth:`Cron.add` was asked for: an expression or a
    :class:`Schedule`, or ``at=`` (a one-shot), with ``description`` beside
    an expression."""
    if at is not None or schedule is None:
        if schedule is not None:
            raise CronScheduleError(
                f"runtime schedule {name!r}: give a schedule or at=, not both (got {schedule!r} and at={at!r})"
            )
        if at is None:
            raise CronScheduleError(f"runtime schedule {name!r}: give a schedule (an expression) or at=")
        return Schedule(at=at, description=description)
    if description is None:
        return schedule
    if not isinstance(schedule, str):
        raise CronScheduleError(f"runtime schedule {name!r}: give description= inside the Schedule, not beside it")
    return Schedule(schedule, description=description)


def _added_detail(stored: RuntimeSchedule) -> str:
    """What an add recorded: the definition in brief."""
    s = stored.schedule
    return f"revision {stored.revision}: {s.expression} in {s.timezone}"
