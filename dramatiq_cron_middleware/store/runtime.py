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
import functools
import inspect
import json
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from dramatiq.logging import get_logger

from ..errors import CronConfigurationError, CronScheduleError, CronUnavailableError, shown
from ..schedules.cadence import cadence
from ..schedules.expression import SEMANTICS
from ..schedules.ids import check_runtime_actor, runtime_id
from ..schedules.ids import split_runtime_id as split_id
from ..schedules.instants import UTC
from ..schedules.schedule import (
    DEFAULT_CATCH_UP_WINDOW,
    DEFAULT_TIME_LIMIT,
    NAME_PATTERN,
    NAME_RULE,
    NEVER,
    BoundSchedule,
    CatchUp,
    Schedule,
    bind_schedule,
    check_bounds,
    check_description,
    interval_label,
    of_actor,
    parse_timezone,
    uses_hash,
)
from .codes import decode, load_script
from .collector import collector_paused
from .connection import credentials_refused, describe, redact
from .keys import Keys
from .read_ahead import read_ahead

_decode: Callable[[str], Any]
try:  # faster than the stdlib decoder, and a takeover decodes every definition
    from orjson import loads as _decode
except ImportError:  # pragma: no cover - PyPy, or installed without it
    _decode = json.loads

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

#: The definition format written (the ``"v"`` field).  A definition of
#: another format is skipped with a WARNING, never guessed at.
FORMAT = 1

#: The largest definition accepted, in bytes of JSON (args, kwargs and
#: options included).  Definitions are read on every leader takeover, so
#: they are meant to be small: pass a tenant id, not the tenant.
MAX_DEFINITION_BYTES = 65_536


# Definitions per script call in add_many: a script of 500 writes runs in a
# few milliseconds, short of any client timeout, and keeps other clients'
# commands waiting no longer.
_BATCH = 500
# Entries per HSCAN / change page / lexical page.
_PAGE = 1000


@dataclasses.dataclass(frozen=True)
class ActorInfo:
    """What a runtime schedule needs to know of its actor at the call."""

    actor_name: str
    queue_name: str
    #: The actor's time limit in ms, for the default overlap guard expiry.
    time_limit: int = DEFAULT_TIME_LIMIT
    #: The actor function's signature, which args/kwargs must fit; None
    #: when it cannot be read (then they are not checked).
    signature: inspect.Signature | None = None


@dataclasses.dataclass(frozen=True)
class RuntimeSchedule:
    """A runtime schedule as stored in Redis.

    ``schedule`` is what the leader fires (``source="runtime"``);
    ``created_ms``/``updated_ms`` are Redis server times (``created_at``,
    ``updated_at`` as datetimes), ``as_of_ms`` the server time of the call
    that returned it, and ``revision`` counts this schedule's writes.
    """

    schedule: BoundSchedule
    created_ms: int
    updated_ms: int
    #: Not compared: two reads of one stored schedule are equal.
    as_of_ms: int = dataclasses.field(compare=False)
    #: The schedule's own count of writes: 1 when created (also when added
    #: again after a removal), one more at each replacement or update.
    #: (``schedule.revision`` is the fencing revision the leader's claims
    #: check, a counter shared by all runtime schedules.)
    revision: int = 1

    @functools.cached_property
    def next_ms(self) -> int | None:
        """The first tick after ``as_of_ms``, or None when no tick follows
        (past the schedule's ``end``).  Computed when first read: a bulk
        add of many schedules need not walk every expression."""
        upcoming = self.schedule.next_after(self.as_of_ms)
        return None if upcoming >= NEVER else upcoming

    @property
    def id(self) -> str:
        """``actor:name``, the schedule's identity in the ledger."""
        return self.schedule.id

    @property
    def actor_name(self) -> str:
        """The actor the schedule fires."""
        return self.schedule.actor_name

    @property
    def name(self) -> str:
        """The schedule's name among its actor's runtime schedules."""
        return self.schedule.name

    @property
    def next_at(self) -> dt.datetime | None:
        """:attr:`next_ms` as an aware datetime in the schedule's zone, or None."""
        upcoming = self.next_ms
        return None if upcoming is None else _datetime(upcoming, self.schedule.zone)

    @property
    def created_at(self) -> dt.datetime:
        """``created_ms`` as an aware UTC datetime."""
        return _datetime(self.created_ms, UTC)

    @property
    def updated_at(self) -> dt.datetime:
        """``updated_ms`` as an aware UTC datetime."""
        return _datetime(self.updated_ms, UTC)


@dataclasses.dataclass(frozen=True)
class RuntimePage:
    """One page of :meth:`RuntimeSchedules.list`.

    ``cursor`` continues the listing (pass it back as ``cursor=``), None
    on the last page; ``total`` is how many schedules match the ``actor``
    filter (None when ``search`` is given: counting would read them all).
    """

    items: list[RuntimeSchedule]
    cursor: str | None
    total: int | None


class RuntimeSchedules:
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
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.client = client
        self.keys = keys
        self.resolve_actor = resolve_actor
        self.timezone = timezone
        self.catch_up: CatchUp = catch_up
        self.catch_up_window = catch_up_window
        self.history_length = history_length
        self._write = load_script(client, "runtime_write")
        self._remove = load_script(client, "runtime_remove")
        self._changes = load_script(client, "runtime_changes")
        self._read = load_script(client, "runtime_read")
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
        unknown = sorted(set(changes) - _SCHEDULE_FIELDS)
        if unknown or "name" in changes:
            options = ", ".join(sorted(_SCHEDULE_FIELDS - {"name"}))
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
        with self._store("write runtime schedules"):
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
                    out.append(_stored(stored, created=created, updated=now, now=now, revision=revision))
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
        with self._store("remove a runtime schedule"):
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
        with self._store("retire one-shot runtime schedules"):
            for schedule in schedules:
                assert schedule.at is not None
                args = [schedule.id, schedule.revision, schedule.at]
                if decode(self._remove(keys=self._write_keys, args=args)).ok:
                    removed.append(schedule.id)
        return removed

    # -- reading -------------------------------------------------------------

    def get(self, actor: object, name: str) -> RuntimeSchedule | None:
        """The runtime schedule ``name`` of ``actor``, or None if there is none
        (or its definition cannot be read: one WARNING says why).

        Parameters:
          actor(Actor|str): The actor or its name (it need not be declared).
          name(str): The schedule's name.

        Raises:
          CronScheduleError: a bad actor or name.
          CronUnavailableError: Redis did not answer.
        """
        schedule_id = schedule_id_of(actor, name)
        with self._store("read a runtime schedule"):
            read = decode(self._read(keys=[self.keys.runtime], args=[schedule_id]))
        (text,) = read.payload
        if text is None:
            return None
        return self._record(schedule_id, text, now=read.server_ms)

    def list(
        self,
        *,
        actor: object | None = None,
        search: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> RuntimePage:
        """One page of runtime schedules, in order of their ids.

        It reads a lexical index of the ids, so a page costs about the same
        whatever the number of schedules (a ``search`` reads ids, not
        definitions, until the page is full).

        Parameters:
          actor(Actor|str): Only this actor's schedules.  Defaults to None,
            meaning every actor's.
          search(str): Only schedules whose id (``actor:name``) contains this,
            ignoring case.  Defaults to None.
          cursor(str): Where the previous page ended (its ``cursor``).
            Defaults to None, meaning the first page.
          limit(int): At most this many schedules (1 to 10000).  Defaults to 100.

        Raises:
          CronScheduleError: a bad filter or limit.
          CronUnavailableError: Redis did not answer.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise CronScheduleError(f"runtime schedules: limit must be an int from 1 to 10000, got {limit!r}")
        if search is not None and not isinstance(search, str):
            raise CronScheduleError(f"runtime schedules: search must be a string, got {search!r}")
        if cursor is not None and not isinstance(cursor, str):
            raise CronScheduleError(f"runtime schedules: cursor must be a string, got {cursor!r}")
        low, high = "-", "+"
        if actor is not None:
            actor_name = _actor_name(actor)
            # Ids of one actor are exactly ``actor:...``, and ';' follows ':'.
            low, high = f"[{actor_name}:", f"({actor_name};"
        if cursor is not None and (low == "-" or cursor > low[1:]):
            low = "(" + cursor
        total: int | None = None
        with self._store("list runtime schedules"):
            ids = self._page_ids(low, high, search, limit + 1)
            more = len(ids) > limit
            ids = ids[:limit]
            reply = decode(self._read(keys=[self.keys.runtime], args=ids))
            now, texts = reply.server_ms, reply.payload
            if search is None:
                count: Any = (
                    self.client.zcard(self.keys.runtime_ids)
                    if actor is None
                    else self.client.zlexcount(self.keys.runtime_ids, f"[{actor_name}:", f"({actor_name};")
                )
                total = int(count)
        items = []
        for schedule_id, text in zip(ids, texts, strict=True):
            if text is None:  # removed between the two reads
                continue
            record = self._record(schedule_id, text, now=now)
            if record is not None:
                items.append(record)
        return RuntimePage(items=items, cursor=ids[-1] if more else None, total=total)

    def ids(self) -> builtins.list[str]:
        """Every stored schedule's id, in the index's (lexical) order: what a
        caller that orders or filters them its own way reads, with
        :meth:`version` to know when to read them again.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        out: builtins.list[str] = []
        low = "-"
        with self._store("list runtime schedule ids"):
            while True:
                chunk: Any = self.client.zrangebylex(self.keys.runtime_ids, low, "+", start=0, num=10 * _PAGE)
                out += chunk
                if len(chunk) < 10 * _PAGE:
                    return out
                low = "(" + chunk[-1]

    def get_many(self, schedule_ids: Sequence[str]) -> builtins.list[RuntimeSchedule]:
        """The stored schedules of these ids (``actor:name``), in their
        order, in one round trip; an id with no (readable) definition is
        left out.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        if not schedule_ids:
            return []
        with self._store("read runtime schedules"):
            reply = decode(self._read(keys=[self.keys.runtime], args=list(schedule_ids)))
        records = (
            self._record(i, text, now=reply.server_ms)
            for i, text in zip(schedule_ids, reply.payload, strict=True)
            if text is not None
        )
        return [r for r in records if r is not None]

    def count_by_actor(self) -> dict[str, int]:
        """How many runtime schedules each actor has, in the order of their ids.

        Two commands per actor, however many schedules each has: the ids of
        one actor are one lexical range of the index, so the count jumps from
        one actor's range to the next.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        out: dict[str, int] = {}
        low = "-"
        with self._store("count runtime schedules"):
            while True:
                first: Any = self.client.zrangebylex(self.keys.runtime_ids, low, "+", start=0, num=1)
                if not first:
                    return out
                actor = first[0].partition(":")[0]
                out[actor] = int(self.client.zlexcount(self.keys.runtime_ids, f"[{actor}:", f"({actor};"))
                low = f"({actor};"

    def _page_ids(self, low: str, high: str, search: str | None, wanted: int) -> builtins.list[str]:
        if search is None:
            ids: Any = self.client.zrangebylex(self.keys.runtime_ids, low, high, start=0, num=wanted)
            return list(ids)
        needle = search.lower()
        found: builtins.list[str] = []
        while len(found) < wanted:
            chunk: Any = self.client.zrangebylex(self.keys.runtime_ids, low, high, start=0, num=_PAGE)
            found += [i for i in chunk if needle in i.lower()]
            if len(chunk) < _PAGE:
                break
            low = "(" + chunk[-1]
        return found[:wanted]

    # -- what the leader reads -----------------------------------------------

    def version(self) -> int:
        """The version counter: the number of writes and removals of runtime
        schedules so far (0 when there were none, or the keys were wiped).
        A leader that knows version ``v`` and reads a higher one calls
        :meth:`changes_since` with ``v``.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        with self._store("read the runtime schedules' version"):
            value = self.client.get(self.keys.runtime_version)
        return int(value or 0)

    def changes_since(self, version: int) -> tuple[int, dict[str, BoundSchedule | None]]:
        """What changed after ``version``: ``(new_version, changes)``.

        ``changes`` maps each schedule id written or removed after
        ``version`` to its current definition, or to None when it is removed
        (a definition that cannot be read, for example corrupt JSON, also
        maps to None after one WARNING naming it: the caller must not keep
        firing an older copy of it).  An id changed several times appears
        once, as it is now.  ``new_version`` is the counter as of the last
        page read: every change up to it is included, so the next call
        passes it.  Changes are read in pages of 1000, each atomic with the
        counter; a write landing between pages is reported now or next time.

        If ``new_version`` is *below* ``version``, the keys were wiped
        (FLUSHALL, a Redis restart without persistence): ``changes`` is then
        empty and the caller must reload everything with :meth:`load_all`.

        Parameters:
          version(int): The version the caller is up to date with: from
            :meth:`load_all`, or the ``new_version`` of the previous call.

        Returns:
          tuple: ``(new_version, {schedule id: BoundSchedule or None})``.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        changed: dict[str, BoundSchedule | None] = {}
        after = version
        k = self.keys
        with self._store("read runtime schedule changes"):
            while True:
                page = decode(
                    self._changes(keys=[k.runtime_changes, k.runtime, k.runtime_version], args=[after, _PAGE])
                )
                current = int(page.payload[0])
                rows = page.payload[1:]
                if current < version:
                    return current, {}
                for i in range(0, len(rows), 3):
                    schedule_id, score, text = rows[i], int(float(rows[i + 1])), rows[i + 2]
                    after = max(after, score)
                    changed[schedule_id] = None if text is None else self._bound(schedule_id, text)
                if len(rows) < 3 * _PAGE:
                    return max(current, after), changed

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
        with self._store("check owed runtime ticks"):
            reply = decode(self._drop_stale(keys=[self.keys.runtime_revs, self.keys.history], args=args))
        return [bool(int(flag)) for flag in reply.payload]

    def load_all(self) -> tuple[int, dict[str, BoundSchedule]]:
        """Every stored runtime schedule: ``(version, {schedule id: schedule})``.

        ``version`` is read *before* the hash is scanned (HSCAN, 1000 at a
        time, so Redis is never blocked for long): a write during the scan
        may or may not be seen, and calling :meth:`changes_since` with
        ``version`` afterwards applies it either way.  A definition that
        cannot be read is skipped with one WARNING naming it.

        Returns:
          tuple: ``(version, {schedule id: BoundSchedule})``.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        out: dict[str, BoundSchedule] = {}
        problems: builtins.list[StoredProblem] = []
        with self._store("load the runtime schedules"), collector_paused():
            version = int(self.client.get(self.keys.runtime_version) or 0)
            for page in read_ahead(self._scan()):
                for schedule_id, text in page.items():
                    bound, problem = self._recheck(schedule_id, text)
                    if bound is not None:
                        out[schedule_id] = bound
                    if problem is not None:
                        problems.append(problem)
        if problems:
            self.logger.warning("%s", describe_problems(problems, self.keys.runtime))
        return version, out

    def recheck(self) -> builtins.list[StoredProblem]:
        """Every stored definition this process cannot read (it is skipped:
        it does not fire), or reads differently from how it was written
        (its cron expression has another canonical form under this
        version's rules, :data:`~dramatiq_cron_middleware.schedules.expression.SEMANTICS`,
        so its next runs may have changed).  What ``dramatiq-cron check``
        reports; nothing is logged.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        problems: builtins.list[StoredProblem] = []
        with self._store("check the runtime schedules"):
            for page in read_ahead(self._scan()):
                for schedule_id, text in page.items():
                    problem = self._recheck(schedule_id, text)[1]
                    if problem is not None:
                        problems.append(problem)
        return sorted(problems, key=lambda p: p.schedule_id)

    def _recheck(self, schedule_id: str, text: str) -> tuple[BoundSchedule | None, StoredProblem | None]:
        """A stored definition as a schedule (None when it cannot be read),
        and what is wrong with it, if anything."""
        try:
            bound, stored = _read(schedule_id, text)
        except Exception as exc:  # whatever a corrupt definition makes binding raise: never stop the others
            return None, StoredProblem(schedule_id, "unreadable", f"its definition cannot be read ({exc})")
        if stored is not None and stored != bound.expression:
            return bound, StoredProblem(
                schedule_id, "changed", f"stored as {stored!r}, now read as {bound.expression!r}", bound=bound
            )
        return bound, None

    def _scan(self) -> Iterator[dict[str, str]]:
        cursor = 0
        while True:
            reply: Any = self.client.hscan(self.keys.runtime, cursor, count=_PAGE)
            cursor, chunk = int(reply[0]), reply[1]
            yield chunk
            if cursor == 0:
                return

    # -- definitions -----------------------------------------------------------

    def _prepare(self, actor: object, schedule: object, name: object) -> tuple[BoundSchedule, str]:
        """Validate one item; return it bound, and its definition without the
        closing brace (the write script appends revision and times)."""
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise CronScheduleError(f"runtime schedule of {_describe_actor(actor)}: {NAME_RULE}, got {shown(name)}")
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
        definition = _definition(bound)
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
            bound = _bind_definition(json.loads(body))
        return bound, body[:-1]

    def _bound(self, schedule_id: str, text: str) -> BoundSchedule | None:
        """A stored definition as a schedule, or None after one WARNING."""
        try:
            bound = _read(schedule_id, text)[0]
        except Exception as exc:  # whatever a corrupt definition makes binding raise: never stop the others
            self.logger.warning(
                "Skipping runtime schedule %r in %s: its definition cannot be read (%s).",
                schedule_id,
                self.keys.runtime,
                exc,
            )
            return None
        return bound

    def _record(self, schedule_id: str, text: str, *, now: int) -> RuntimeSchedule | None:
        bound = self._bound(schedule_id, text)
        if bound is None:
            return None
        data = json.loads(text)
        return _stored(
            bound,
            created=int(data.get("created", 0)),
            updated=int(data.get("updated", 0)),
            now=now,
            revision=int(data.get("revision", 1)),
        )

    @contextmanager
    def _store(self, what: str) -> Iterator[None]:
        """Turn Redis failures into one clear exception."""
        try:
            yield
        except (redis.AuthenticationError, redis.ResponseError) as exc:
            refused = credentials_refused(exc, describe(self.client))
            if refused is None and isinstance(exc, redis.ResponseError):
                raise CronConfigurationError(f"cannot {what}: Redis refused ({redact(str(exc))})") from None
            raise CronConfigurationError(f"cannot {what}: {refused or redact(str(exc))}") from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise CronUnavailableError(
                f"cannot {what}: Redis at {describe(self.client)} did not answer ({redact(str(exc))})"
            ) from None


def _read(schedule_id: str, text: str) -> tuple[BoundSchedule, object]:
    """A stored definition bound, and its expression as stored.

    Raises:
      Exception: whatever a corrupt definition makes binding raise.
    """
    data = _decode(text)
    if not isinstance(data, dict) or data.get("v") != FORMAT:
        version = data.get("v") if isinstance(data, dict) else None
        raise ValueError(f"format {version!r} is not {FORMAT}")
    stored = data.get("expression")
    bound = _bind_definition(data)
    bound.known_as(schedule_id)
    return bound, stored


@dataclasses.dataclass(frozen=True)
class StoredProblem:
    """A stored runtime definition that this process cannot read
    (``kind="unreadable"``: skipped, it does not fire) or reads differently
    from how it was written (``"changed"``: its expression has another
    canonical form now, ``bound`` is how it fires)."""

    schedule_id: str
    kind: str
    detail: str
    bound: BoundSchedule | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.schedule_id, "problem": self.kind, "detail": self.detail}


def describe_problems(problems: Sequence[StoredProblem], where: str) -> str:
    """One sentence on every stored definition with a problem (the
    leader's one WARNING when it loads them)."""
    parts = []
    for kind, verb in (
        ("unreadable", "cannot be read and are skipped"),
        ("changed", "read differently than when they were written, and fire as now read"),
    ):
        of_kind = sorted((p for p in problems if p.kind == kind), key=lambda p: p.schedule_id)
        if of_kind:
            shown = "; ".join(f"{p.schedule_id!r}: {p.detail}" for p in of_kind[:5])
            more = f"; and {len(of_kind) - 5} more" if len(of_kind) > 5 else ""
            parts.append(f"{len(of_kind)} {verb} ({shown}{more})")
    return (
        f"Stored runtime schedules in {where}: {', '.join(parts)}, under {SEMANTICS}. "
        "'dramatiq-cron check' lists them all; fix or re-add them."
    )


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


def _stored(bound: BoundSchedule, *, created: int, updated: int, now: int, revision: int) -> RuntimeSchedule:
    return RuntimeSchedule(schedule=bound, created_ms=created, updated_ms=updated, as_of_ms=now, revision=revision)


def _datetime(ms: int, zone: dt.tzinfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=zone)


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


def already_exists(schedule_id: str) -> CronScheduleError:
    """The error of a create-only add of a stored name."""
    return CronScheduleError(
        f"runtime schedule {shown(schedule_id)} already exists (an add that may replace it, or an update, changes it)"
    )


#: The options of a :class:`Schedule`, which :meth:`RuntimeSchedules.update` may change.
_SCHEDULE_FIELDS = frozenset(f.name for f in dataclasses.fields(Schedule))


def as_schedule(bound: BoundSchedule) -> Schedule:
    """The :class:`Schedule` that binds to ``bound`` again: every option as
    resolved when it was stored (an interval schedule has no expression)."""
    values = {f: getattr(bound, f) for f in _SCHEDULE_FIELDS if hasattr(bound, f)}
    values["name"] = bound.name if bound.named else None
    if getattr(bound, "at", None) is not None:  # a one-shot: bound as a one-tick interval
        values.update(expression=None, every=None, offset=0, start=None, end=None)
    elif bound.every is not None:
        values["expression"] = None
    return Schedule(**values)


def changed_schedule(bound: BoundSchedule, changes: Mapping[str, Any]) -> Schedule:
    """The :class:`Schedule` of ``bound`` with ``changes`` (option ->
    value) applied and every other option as stored: what
    :meth:`RuntimeSchedules.update` writes, and what the dashboard's Edit
    form stores under a new name.  One kind of timing replaces another:
    an ``expression`` clears ``every`` and ``at``, ``every`` clears the
    expression and ``at``, and ``at`` (a one-shot takes nothing else)
    clears the expression, the interval and ``start``/``end``, unless the
    same changes set them too.

    Raises:
      CronScheduleError: a bad value, naming the actor.
    """
    out = dict(changes)
    if out.get("expression") is not None:
        out.setdefault("every", None)
        out.setdefault("offset", 0)
    if out.get("every") is not None:
        out.setdefault("expression", None)
    if out.get("expression") is not None or out.get("every") is not None:
        out.setdefault("at", None)
    if out.get("at") is not None:
        for field, cleared in (("expression", None), ("every", None), ("offset", 0), ("start", None), ("end", None)):
            out.setdefault(field, cleared)
    with of_actor(bound.actor_name):
        return dataclasses.replace(as_schedule(bound), **out)


def describe_changes(before: RuntimeSchedule, after: RuntimeSchedule) -> str:
    """What an update changed, for the audit trail: ``expression '0 9 * * *'
    -> '0 10 * * *'``.  Of args, kwargs and options only the changed keys
    are named (their values may be private)."""
    old, new = _definition(before.schedule), _definition(after.schedule)
    parts = [f"revision {after.revision}"]
    for key, value in new.items():
        was = old.get(key)
        if was == value:
            continue
        if key == "args":
            parts.append("args changed")
        elif key in ("kwargs", "options"):
            was = was or {}
            keys = sorted(k for k in {*was, *value} if was.get(k, _GONE) != value.get(k, _GONE))
            parts.append(f"{key} {', '.join(keys)} changed")
        else:
            parts.append(f"{key} {was!r} -> {value!r}")
    return "; ".join(parts)


_GONE = object()


def _definition(bound: BoundSchedule) -> dict[str, Any]:
    """The stored form (format 1): every default already resolved, so any
    process reads the same schedule.  ``v`` comes first: the write script
    checks it there."""
    interval = bound.every is not None
    return {
        "v": FORMAT,
        "actor": bound.actor_name,
        "queue": bound.queue_name,
        "name": bound.name,
        "expression": None if interval else bound.expression,
        "every": bound.every,
        "offset": bound.offset,
        "timezone": bound.timezone,
        "args": list(bound.args),
        "kwargs": bound.kwargs,
        "catch_up": bound.catch_up,
        "catch_up_window": bound.catch_up_window,
        "jitter": bound.jitter,
        "max_age": bound.max_age,
        "overlap": bound.overlap,
        "overlap_ttl": bound.overlap_ttl,
        "options": bound.options,
        "start": bound.start,
        "end": bound.end,
        "at": bound.at,
        "description": bound.description or None,
        "grace": bound.grace,
        "max_runtime": bound.max_runtime,
        "failure_threshold": bound.failure_threshold,
    }


def _bind_definition(data: dict[str, Any]) -> BoundSchedule:
    """A definition (format 1) bound by the same rules as ``cron=``."""
    name, args, kwargs, options = data["name"], data["args"], data["kwargs"], data["options"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CronScheduleError(f"actor {data['actor']!r}: bad runtime schedule name {shown(name)}")
    if not isinstance(args, list):
        raise CronScheduleError(f"args must be a list, got {args!r}")
    revision = int(data.get("rev", 0))
    for field in _MONITORING_FIELDS:  # absent from definitions stored before run monitoring
        data.setdefault(field, None)
    shared = _shared_fields(data)
    offset, start, end = data["offset"], data["start"], data["end"]
    description = data.get("description")
    expression = data["expression"]
    if (
        data.get("at") is not None
        or (isinstance(expression, str) and uses_hash(expression))
        or not (
            type(kwargs) is dict
            and type(options) is dict
            and _PLAIN.issuperset(map(type, shared))
            and type(offset) is int
            and type(start) in _BOUND_TYPES
            and type(end) in _BOUND_TYPES
            and (offset == 0 or data["every"] is not None)
            and type(data["timezone"]) is str
        )
    ):
        # Anything unusual takes the whole rule book, and its error; so does
        # an H expression, whose values (and whether they ever fire) depend
        # on the schedule's name.
        return _bind_fully(data, revision)
    try:
        zone_name = _zone(data["timezone"])[0]
    except CronScheduleError:
        return _bind_fully(data, revision)  # the error, naming the actor
    # Many schedules differ only in their name, arguments, zone, offset and
    # bounds: everything else is validated once per distinct combination
    # (bind_schedule, the rules of cron=; a parse of a cron expression
    # costs ~100 us), and each schedule is that template with its own name,
    # arguments, revision, zone, offset and bounds (checked here by the
    # same rules; a name matching NAME_PATTERN, a JSON list and a JSON
    # object need no further check).  Binding each in full dominated a
    # takeover's load of a large runtime set.
    template, values = _template(shared, json.dumps(options, sort_keys=True) if options else "")
    values = values.copy()
    values[_AT_NAME] = name
    values[_AT_ARGS] = tuple(args)
    values[_AT_KWARGS] = kwargs
    values[_AT_OPTIONS] = dict(template.options)  # a private copy
    values[_AT_REVISION] = revision
    if description is not None:
        where = f"actor {template.actor_name!r}, runtime schedule {shown(name)}"
        values[_AT_DESCRIPTION] = check_description(where, description)
    when = template.cadence
    if offset or start is not None or end is not None or zone_name != when.timezone:
        where = f"actor {template.actor_name!r}, runtime schedule {shown(name)}"
        label = interval_label(where, template.every, offset) if offset else when.expression
        when = cadence(label, zone_name, when.every, offset, *check_bounds(where, start, end))
    values[_AT_CADENCE] = when
    return BoundSchedule(*values)


def _bind_fully(data: dict[str, Any], revision: int) -> BoundSchedule:
    # JSON decoding makes a new string for every value; schedules share a
    # few actors, queues, zones and policies, so share the strings.  (A
    # schedule bound from a template shares the template's.)
    for key in _SHARED_STRINGS:
        value = data.get(key)
        if isinstance(value, str):
            data[key] = sys.intern(value)
    actor_name = data["actor"]
    if not isinstance(actor_name, str):
        raise CronScheduleError(f"actor must be a string, got {shown(actor_name)}")
    check_runtime_actor(actor_name)
    if data.get("at") is not None:  # a one-shot: its interval fields follow from at
        data = {**data, "every": None, "offset": 0, "start": None, "end": None}
    item = Schedule(
        data["expression"],
        timezone=data["timezone"],
        name=data["name"],
        args=tuple(data["args"]),
        kwargs=data["kwargs"],
        catch_up=data["catch_up"],
        catch_up_window=data["catch_up_window"],
        jitter=data["jitter"],
        max_age=data["max_age"],
        overlap=data["overlap"],
        overlap_ttl=data["overlap_ttl"],
        options=data["options"],
        every=data["every"],
        offset=data["offset"],
        start=data["start"],
        end=data["end"],
        at=data.get("at"),
        description=data.get("description"),
        grace=data.get("grace"),
        max_runtime=data.get("max_runtime"),
        failure_threshold=data.get("failure_threshold"),
    )
    return bind_schedule(
        actor_name,
        data["queue"],
        item,
        timezone="UTC",  # unused: the stored definition names its zone
        catch_up="each",
        catch_up_window=0,
        source="runtime",
        revision=revision,
    )


# The fields a template is keyed by: all but the name, arguments, options
# (keyed by their JSON), zone, offset, bounds and the revision.
_TEMPLATE_FIELDS = (
    "actor",
    "queue",
    "expression",
    "every",
    "catch_up",
    "catch_up_window",
    "jitter",
    "max_age",
    "overlap",
    "overlap_ttl",
    "grace",
    "max_runtime",
    "failure_threshold",
)
_MONITORING_FIELDS = ("grace", "max_runtime", "failure_threshold")
_shared_fields = operator.itemgetter(*_TEMPLATE_FIELDS)
# Only values of these exact types take the template path: ``True == 1`` and
# ``1.0 == 1`` would otherwise share a template validated for the int.
_PLAIN = frozenset((str, int, type(None)))
_BOUND_TYPES = (int, type(None))
# BoundSchedule's __init__ arguments, in order, and where the ones a
# schedule does not share with its template sit.
_INIT_FIELDS = tuple(f.name for f in dataclasses.fields(BoundSchedule) if f.init)
(
    _AT_NAME,
    _AT_ARGS,
    _AT_KWARGS,
    _AT_OPTIONS,
    _AT_REVISION,
    _AT_CADENCE,
    _AT_DESCRIPTION,
) = map(
    _INIT_FIELDS.index,
    (
        "name",
        "args",
        "kwargs",
        "options",
        "revision",
        "cadence",
        "description",
    ),
)


@functools.lru_cache(maxsize=16_384)
def _template(shared: tuple[Any, ...], options: str) -> tuple[BoundSchedule, list[Any]]:
    """A schedule validated in full with a placeholder name, no arguments,
    no offset, no bounds and in UTC, and its __init__ arguments."""
    data = dict(zip(_TEMPLATE_FIELDS, shared, strict=True))
    data.update(
        name="template",
        args=[],
        kwargs={},
        options=json.loads(options) if options else {},
        timezone="UTC",
        offset=0,
        start=None,
        end=None,
    )
    template = _bind_fully(data, 0)
    return template, [getattr(template, field) for field in _INIT_FIELDS]


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> tuple[str, dt.tzinfo]:
    """A stored zone name, checked as ``cron=`` checks it, and its zone."""
    zone = parse_timezone(name, what="runtime schedule")
    return (sys.intern(name) if zone is not UTC else "UTC"), zone


# (The expression needs none: the normalised expression comes from a cache.)
_SHARED_STRINGS = ("actor", "queue", "timezone", "catch_up", "overlap")


def _actor_name(actor: object) -> str:
    name = getattr(actor, "actor_name", actor)
    if not isinstance(name, str):
        raise CronScheduleError(f"runtime schedule: actor must be an actor or an actor name, got {shown(actor)}")
    check_runtime_actor(name)
    return name


def _describe_actor(actor: object) -> str:
    return repr(getattr(actor, "actor_name", actor))


def schedule_id_of(actor: object, name: object) -> str:
    """The id of ``actor``'s (an actor or its name) runtime schedule ``name``, checked."""
    return runtime_id(_actor_name(actor), name)
