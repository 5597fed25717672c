"""Runtime schedules: schedule definitions stored in Redis.

A runtime schedule is added, replaced and removed while the app runs (from
a worker, a web view, a script or the ``dramatiq-cron`` command) instead of
being declared with the ``cron`` actor option.  Its definition is JSON
under the scheduler's prefix, never pickle, validated at the call by the
same rules as ``cron=`` (:func:`~dramatiq_cron_middleware.schedules.schedule.bind_schedule`).

Keys (all under the ``{prefix}`` hash tag, see keys.py and docs/design.md):

- ``{p}:runtime``: hash, schedule id -> definition JSON;
- ``{p}:runtime:revs``: hash, schedule id -> revision (the fenced claim
  refuses a runtime schedule whose revision is not this one, so a removed
  or replaced definition never fires);
- ``{p}:runtime:version``: counter, incremented by every write and removal;
- ``{p}:runtime:changes``: sorted set, schedule id -> version of its last
  write or removal (a removal stays as a tombstone);
- ``{p}:runtime:ids``: sorted set of stored ids (score 0), for listing.
- ``{p}:runtime:notify``: list of at most one notification, pushed by
  every write and removal; the idle leader blocks on it.

Every write of a definition together with its revision, and every
removal, is one Lua script that checks everything before its first write,
so a refused or failed call leaves nothing half-written.  A schedule's id
is ``actor:name``; declared schedules' ids contain ``/``, runtime ones never
do, so the two cannot collide.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis

from ..errors import CronScheduleError, shown
from ..schedules.ids import check_runtime_actor
from ..schedules.ids import split_runtime_id as split_id
from ..schedules.instants import UTC
from ..schedules.schedule import (
    DEFAULT_CATCH_UP_WINDOW,
    NAME_PATTERN,
    NAME_RULE,
    BoundSchedule,
    CatchUp,
    Schedule,
    bind_schedule,
    of_actor,
)
from .codes import decode, load_script
from .keys import Keys
from .runtime_definition import (
    FORMAT,
    MAX_DEFINITION_BYTES,
    SCHEDULE_FIELDS,
    ActorInfo,
    RuntimePage,
    RuntimeSchedule,
    StoredProblem,
    already_exists,
    as_schedule,
    bind_definition,
    changed_schedule,
    definition_of,
    describe_actor,
    describe_changes,
    describe_problems,
    schedule_id_of,
    stored_schedule,
)
from .runtime_reads import RuntimeReader, redis_errors

__all__ = [
    "FORMAT",
    "MAX_DEFINITION_BYTES",
    "NAME_PATTERN",
    "ActorInfo",
    "RuntimePage",
    "RuntimeSchedule",
    "RuntimeSchedules",
    "StoredProblem",
    "already_exists",
    "as_schedule",
    "changed_schedule",
    "describe_changes",
    "describe_problems",
    "schedule_id_of",
    "split_id",
]


# Definitions per script call in add_many: a script of 500 writes runs in a
# few milliseconds, short of any client timeout, and keeps other clients'
# commands waiting no longer.
_BATCH = 500


class RuntimeSchedules(RuntimeReader):
    """Runtime schedule definitions in Redis: add, replace, remove, list, and
    what the leader reads to learn of changes.

    Parameters:
      client(redis.Redis): A client with short timeouts and
        ``decode_responses=True`` (see
        :func:`~dramatiq_cron_middleware.store.connection.scheduler_clients`).
      keys(Keys): The scheduler's key names.
      resolve_actor(callable): Given an actor or an actor name, returns its
        :class:`ActorInfo`, or raises :class:`CronScheduleError` when the
        actor is not declared.  Only ``add`` calls it: a stored schedule is
        read whether or not this process declares its actor.
      timezone(str): The zone of a schedule that names none.  Defaults to
        ``"UTC"``.
      catch_up(str): The catch-up policy of a schedule that sets none.
        Defaults to ``"each"``.
      catch_up_window(int): The catch-up window (ms) of a schedule that sets
        none.  Defaults to :data:`DEFAULT_CATCH_UP_WINDOW` (five minutes).
      history_length(int): Approximate cap of the history stream (a
        replacement or re-add that restarts a schedule records it there).
        Defaults to 10000.

    The defaults are resolved when a schedule is written and stored with
    it, so every process reads the same schedule whatever its own defaults.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        resolve_actor: Callable[[object], ActorInfo],
        timezone: str = "UTC",
        catch_up: CatchUp = "each",
        catch_up_window: int = DEFAULT_CATCH_UP_WINDOW,
        history_length: int = 10_000,
    ) -> None:
        super().__init__(client, keys)
        self.resolve_actor = resolve_actor
        self.timezone = timezone
        self.catch_up: CatchUp = catch_up
        self.catch_up_window = catch_up_window
        self.history_length = history_length
        self._write = load_script(client, "runtime_write")
        self._remove = load_script(client, "runtime_remove")
        self._drop_stale = load_script(client, "runtime_drop_stale")

    @property
    def _write_keys(self) -> list[str]:
        k = self.keys
        return [
            k.runtime,
            k.runtime_revs,
            k.runtime_version,
            k.runtime_changes,
            k.runtime_ids,
            k.ticks,
            k.shapes,
            k.history,
            k.runtime_notify,
        ]

    # -- writing -------------------------------------------------------------

    def add(self, actor: object, schedule: str | Schedule, *, name: str, replace: bool = True) -> RuntimeSchedule:
        """Create (or, with ``replace``, replace) the runtime schedule
        ``name`` of ``actor``.

        Parameters:
          actor(Actor|str): A declared actor, or its name.
          schedule(str|Schedule): A cron expression, or a :class:`Schedule`
            with all its options (its ``name``, if set, must be ``name``).
          name(str): Unique among the actor's runtime schedules: 1 to 64
            letters, digits, ``_``, ``.`` or ``-``.
          replace(bool): Whether a schedule already stored under that name
            is replaced (with the whole new definition).  Defaults to True,
            as before this option existed: adding the same schedule again is
            harmless, which is what a retry after a lost reply does.  False
            creates only, refusing an existing name.

        Returns:
          RuntimeSchedule: what was stored, with its revision and next tick.

        Raises:
          CronScheduleError: naming the bad value (unknown actor, bad name,
            expression, zone or option, arguments that are not JSON, a
            definition over :data:`MAX_DEFINITION_BYTES`, or with
            ``replace=False`` a name already stored); nothing is written.
          CronUnavailableError: Redis did not answer; the write happened
            entirely or not at all.
        """
        return self.add_many([(actor, schedule, name)], replace=replace)[0]

    def add_many(
        self, items: Iterable[tuple[object, str | Schedule, str]], *, replace: bool = True
    ) -> builtins.list[RuntimeSchedule]:
        """Create (or, with ``replace``, replace) many runtime schedules:
        ``(actor, schedule, name)`` each, as for :meth:`add`.

        Every item is validated before anything is written, so one bad item
        writes nothing.  The writes then go in scripts of 500 definitions;
        each script is atomic, the whole call is not
        (after a :class:`CronUnavailableError` a prefix of the items may be
        stored: adding them again with ``replace=True`` is harmless).  With
        ``replace=False`` a batch holding a stored name writes nothing, and
        the error names that schedule.

        Raises:
          CronScheduleError: as for :meth:`add`, naming the item.
          CronUnavailableError: Redis did not answer.
        """
        prepared = [self._prepare(actor, schedule, name) for actor, schedule, name in items]
        ids = [bound.id for bound, _ in prepared]
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})[:5]
            raise CronScheduleError(f"runtime schedules: the same schedule is given twice: {', '.join(twice)}")
        return self._write_prepared(prepared, "" if replace else "new")

    def update(self, schedule_id: str, changes: dict[str, Any]) -> tuple[RuntimeSchedule, RuntimeSchedule]:
        """Change some options of a stored runtime schedule and keep the
        rest (its arguments, zone, options...): a :class:`Schedule` field
        per keyword, as ``update("report:tenant-42", {"expression": "0 10
        * * *"})``.  Giving ``expression`` clears ``every`` and the reverse.
        The write is refused if another write changed the schedule since it
        was read here (the read and write are then tried again, up to three
        times).

        Returns:
          tuple: ``(before, after)``, both as stored.

        Raises:
          CronScheduleError: no such schedule, an unknown or bad option
            (named), or a ``name`` (a rename is a new schedule: add it and
            remove this one); nothing is written.
          CronUnavailableError: Redis did not answer.
        """
        actor, name = split_id(schedule_id)
        unknown = sorted(set(changes) - SCHEDULE_FIELDS)
        if unknown or "name" in changes:
            options = ", ".join(sorted(SCHEDULE_FIELDS - {"name"}))
            what = (
                f"unknown option(s) {', '.join(unknown)}; the options are {options}"
                if unknown
                else "name cannot be changed (add the new name, then remove this one)"
            )
            raise CronScheduleError(f"runtime schedule {shown(schedule_id)}: {what}")
        for _ in range(3):
            before = self.get(actor, name)
            if before is None:
                raise CronScheduleError(f"there is no runtime schedule {shown(schedule_id)}")
            item = changed_schedule(before.schedule, changes)
            prepared = self._prepare(actor, item, name)
            try:
                (after,) = self._write_prepared([prepared], str(before.schedule.revision))
            except _Changed:
                continue
            return before, after
        raise CronScheduleError(f"runtime schedule {shown(schedule_id)} kept changing while being updated; try again")

    def _write_prepared(
        self, prepared: Sequence[tuple[BoundSchedule, str]], condition: str
    ) -> builtins.list[RuntimeSchedule]:
        """Write validated definitions under ``condition`` (see
        runtime_write.lua)."""
        out: builtins.list[RuntimeSchedule] = []
        with redis_errors(self.client, "write runtime schedules"):
            # One script call per batch, not pipelined: a batch runs for a
            # few milliseconds inside Redis, so the round trip hardly counts,
            # and Redis Cluster's pipelines refuse scripts.
            for first in range(0, len(prepared), _BATCH):
                batch = prepared[first : first + _BATCH]
                args: builtins.list[Any] = [MAX_DEFINITION_BYTES, self.history_length, condition]
                for bound, body in batch:
                    args += [bound.id, body, bound.shape]
                try:
                    reply = decode(self._write(keys=self._write_keys, args=args))
                except redis.ResponseError as exc:
                    _refused_condition(exc)
                    _raise_at_past(exc)
                    raise
                now, written = reply.server_ms, reply.payload
                for i, (bound, _) in enumerate(batch):
                    rev, created, revision = (int(v) for v in written[3 * i : 3 * i + 3])
                    stored = dataclasses.replace(bound, revision=rev)
                    out.append(stored_schedule(stored, created=created, updated=now, now=now, revision=revision))
        return out

    def remove(self, actor: object, name: str) -> bool:
        """Remove a runtime schedule; from the moment this returns, no claim
        of it is granted (its revision is gone), even to a leader that was
        frozen across the call.

        Parameters:
          actor(Actor|str): The actor or its name (it need not be declared
            any more).
          name(str): The schedule's name.

        Returns:
          bool: True if it existed (or a retry of this very call after a lost
          reply removed it), False if there was nothing to remove.

        Raises:
          CronScheduleError: a bad actor or name.
          CronUnavailableError: Redis did not answer; the removal happened
            entirely or not at all.
        """
        schedule_id = schedule_id_of(actor, name)
        with redis_errors(self.client, "remove a runtime schedule"):
            removed = decode(self._remove(keys=self._write_keys, args=[schedule_id]))
        return removed.ok

    def retire(self, schedules: Sequence[BoundSchedule]) -> builtins.list[str]:
        """Remove one-shots that are done: each only if it is still at its
        revision and its tick was decided (the ledger entry reached its
        ``at``), in one script call each.  Returns the ids removed.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        removed = []
        with redis_errors(self.client, "retire one-shot runtime schedules"):
            for schedule in schedules:
                assert schedule.at is not None
                args = [schedule.id, schedule.revision, schedule.at]
                if decode(self._remove(keys=self._write_keys, args=args)).ok:
                    removed.append(schedule.id)
        return removed

    def drop_stale(self, ticks: Sequence[tuple[BoundSchedule, int, str]]) -> builtins.list[bool]:
        """Of granted ticks ``(schedule, tick ms, message id)`` still owed to
        the broker, which to drop: those whose definition was removed or
        replaced since their claim (each recorded in the history as
        ``dropped``).  One script call.

        Raises:
          CronUnavailableError: Redis did not answer (nothing is known).
        """
        args: builtins.list[Any] = [self.history_length]
        for schedule, tick, message_id in ticks:
            args += [schedule.id, schedule.revision, tick, message_id]
        with redis_errors(self.client, "check owed runtime ticks"):
            reply = decode(self._drop_stale(keys=[self.keys.runtime_revs, self.keys.history], args=args))
        return [bool(int(flag)) for flag in reply.payload]

    def _prepare(self, actor: object, schedule: object, name: object) -> tuple[BoundSchedule, str]:
        """Validate one item; return it bound, and its definition without the
        closing brace (the write script appends revision and times)."""
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise CronScheduleError(f"runtime schedule of {describe_actor(actor)}: {NAME_RULE}, got {shown(name)}")
        info = self.resolve_actor(actor)
        check_runtime_actor(info.actor_name)
        if isinstance(schedule, str):
            with of_actor(info.actor_name):
                item = Schedule(schedule, name=name)
        elif isinstance(schedule, Schedule):
            if schedule.name is not None and schedule.name != name:
                raise CronScheduleError(
                    f"actor {info.actor_name!r}, runtime schedule {shown(name)}: Schedule(name={shown(schedule.name)}) "
                    "differs from name=; give the name once, with name="
                )
            item = schedule  # its name is given to bind_schedule: no copy checked again
        else:
            raise CronScheduleError(
                f"actor {info.actor_name!r}, runtime schedule {shown(name)}: schedule must be a cron expression or a "
                f"Schedule, got {schedule!r} ({type(schedule).__name__})"
            )
        bound = bind_schedule(
            info.actor_name,
            info.queue_name,
            item,
            timezone=self.timezone,
            catch_up=self.catch_up,
            catch_up_window=self.catch_up_window,
            time_limit=info.time_limit,
            source="runtime",
            signature=info.signature,
            name=name,
        )
        definition = definition_of(bound)
        body = json.dumps(definition, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(body.encode())
        if size > MAX_DEFINITION_BYTES:
            raise CronScheduleError(
                f"actor {info.actor_name!r}, runtime schedule {shown(name)}: the definition is {size} bytes of JSON, "
                f"over the limit of {MAX_DEFINITION_BYTES}; keep args and kwargs small (pass ids, not objects)"
            )
        # The caller gets exactly what the leader will read back: where the
        # JSON round trip changes a value (a tuple inside args becomes a
        # list, for example), bind what was read.
        if json.loads(body) != definition:
            bound = bind_definition(json.loads(body))
        return bound, body[:-1]


def _raise_at_past(exc: redis.ResponseError) -> None:
    """The write script's refusal of a one-shot in the past, as the
    caller's error naming the schedule and the instant."""
    parts = str(exc).split()
    parts = parts[parts.index("at_past") :] if "at_past" in parts else []
    if len(parts) >= 4:
        at, now = (dt.datetime.fromtimestamp(int(v) / 1000, tz=UTC).isoformat() for v in parts[2:4])
        raise CronScheduleError(
            f"runtime schedule {parts[1]!r}: at={at} is not after Redis's time ({now}): a one-shot "
            "must lie in the future (to run it now, use trigger)"
        ) from None


class _Changed(Exception):
    """An update's conditional write found another write first."""


def _refused_condition(exc: redis.ResponseError) -> None:
    """Raise what a failed write condition means (see runtime_write.lua)."""
    text = str(exc)
    for word in ("EXISTS ", "CHANGED "):
        at = text.find(word)
        if at >= 0:
            schedule_id = text[at + len(word) :].split()[0] if text[at + len(word) :].split() else "?"
            if word == "CHANGED ":
                raise _Changed(schedule_id) from None
            raise already_exists(schedule_id) from None
