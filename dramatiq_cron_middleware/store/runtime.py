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
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from dramatiq.logging import get_logger

from ..errors import CronConfigurationError, CronScheduleError, CronUnavailableError
from ..schedules.schedule import _UTC as UTC_ZONE
from ..schedules.schedule import (
    DEFAULT_CATCH_UP_WINDOW,
    DEFAULT_TIME_LIMIT,
    NEVER,
    BoundSchedule,
    CatchUp,
    Schedule,
    bind_schedule,
    check_bounds,
    interval_label,
    parse_timezone,
)
from .codes import decode, load_script
from .collector import collector_paused
from .connection import describe, redact
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
]

#: The definition format written (the ``"v"`` field).  A definition of
#: another format is skipped with a WARNING, never guessed at.
FORMAT = 1

#: The largest definition accepted, in bytes of JSON (args, kwargs and
#: options included).  Definitions are read on every leader takeover, so
#: they are meant to be small: pass a tenant id, not the tenant.
MAX_DEFINITION_BYTES = 65_536

#: What a runtime schedule's name may be: a short identifier.  (``\Z``, not
#: ``$``, which would also accept a trailing newline.)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")

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

    ``schedule`` is what the leader fires (``source="runtime"``, its
    ``revision`` set); ``created_ms``/``updated_ms`` are Redis server times,
    and ``as_of_ms`` the server time of the call that returned it.
    """

    schedule: BoundSchedule
    created_ms: int
    updated_ms: int
    #: Not compared: two reads of one stored schedule are equal.
    as_of_ms: int = dataclasses.field(compare=False)

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
    def revision(self) -> int:
        """The version at which it was last written."""
        return self.schedule.revision


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

    def add(self, actor: object, schedule: str | Schedule, *, name: str) -> RuntimeSchedule:
        """Create or replace the runtime schedule ``name`` of ``actor``.

        Parameters:
          actor(Actor|str): A declared actor, or its name.
          schedule(str|Schedule): A cron expression, or a :class:`Schedule`
            with all its options (its ``name``, if set, must be ``name``).
          name(str): Unique among the actor's runtime schedules: 1 to 64
            letters, digits, ``_``, ``.`` or ``-``.

        Returns:
          RuntimeSchedule: what was stored, with its revision and next tick.

        Raises:
          CronScheduleError: naming the bad value (unknown actor, bad name,
            expression, zone or option, arguments that are not JSON, a
            definition over :data:`MAX_DEFINITION_BYTES`); nothing is written.
          CronUnavailableError: Redis did not answer; the write happened
            entirely or not at all.
        """
        return self.add_many([(actor, schedule, name)])[0]

    def add_many(self, items: Iterable[tuple[object, str | Schedule, str]]) -> list[RuntimeSchedule]:
        """Create or replace many runtime schedules: ``(actor, schedule,
        name)`` each, as for :meth:`add`.

        Every item is validated before anything is written, so one bad item
        writes nothing.  The writes then go in scripts of 500 definitions;
        each script is atomic, the whole call is not
        (after a :class:`CronUnavailableError` a prefix of the items may be
        stored: adding them again is harmless).

        Raises:
          CronScheduleError: as for :meth:`add`, naming the item.
          CronUnavailableError: Redis did not answer.
        """
        prepared = [self._prepare(actor, schedule, name) for actor, schedule, name in items]
        out: list[RuntimeSchedule] = []
        with self._store("write runtime schedules"):
            # One script call per batch, not pipelined: a batch runs for a
            # few milliseconds inside Redis, so the round trip hardly counts,
            # and Redis Cluster's pipelines refuse scripts.
            for first in range(0, len(prepared), _BATCH):
                batch = prepared[first : first + _BATCH]
                args: list[Any] = [MAX_DEFINITION_BYTES, self.history_length]
                for bound, body in batch:
                    args += [bound.id, body, bound.shape]
                reply = decode(self._write(keys=self._write_keys, args=args))
                now, written = reply.server_ms, reply.payload
                for i, (bound, _) in enumerate(batch):
                    stored = dataclasses.replace(bound, revision=int(written[2 * i]))
                    out.append(_stored(stored, created=int(written[1 + 2 * i]), updated=now, now=now))
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
        schedule_id = _schedule_id(actor, name)
        with self._store("remove a runtime schedule"):
            removed = decode(self._remove(keys=self._write_keys, args=[schedule_id]))
        return removed.ok

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
        schedule_id = _schedule_id(actor, name)
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
        with self._store("load the runtime schedules"), collector_paused():
            version = int(self.client.get(self.keys.runtime_version) or 0)
            for page in read_ahead(self._scan()):
                for schedule_id, text in page.items():
                    bound = self._bound(schedule_id, text)
                    if bound is not None:
                        out[schedule_id] = bound
        return version, out

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
            raise CronScheduleError(
                f"runtime schedule of {_describe_actor(actor)}: name must be 1 to 64 letters, digits, "
                f"'_', '.' or '-', got {name!r}"
            )
        info = self.resolve_actor(actor)
        _check_actor_name(info.actor_name)
        if isinstance(schedule, str):
            item = Schedule(schedule, name=name)
        elif isinstance(schedule, Schedule):
            if schedule.name is not None and schedule.name != name:
                raise CronScheduleError(
                    f"actor {info.actor_name!r}, runtime schedule {name!r}: Schedule(name={schedule.name!r}) "
                    "differs from name=; give the name once, with name="
                )
            item = dataclasses.replace(schedule, name=name)
        else:
            raise CronScheduleError(
                f"actor {info.actor_name!r}, runtime schedule {name!r}: schedule must be a cron expression or a "
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
        )
        definition = _definition(bound)
        body = json.dumps(definition, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(body.encode())
        if size > MAX_DEFINITION_BYTES:
            raise CronScheduleError(
                f"actor {info.actor_name!r}, runtime schedule {name!r}: the definition is {size} bytes of JSON, "
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
            data = _decode(text)
            if not isinstance(data, dict) or data.get("v") != FORMAT:
                version = data.get("v") if isinstance(data, dict) else None
                raise ValueError(f"format {version!r} is not {FORMAT}")
            bound = _bind_definition(data)
            bound.known_as(schedule_id)
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
        return _stored(bound, created=int(data.get("created", 0)), updated=int(data.get("updated", 0)), now=now)

    @contextmanager
    def _store(self, what: str) -> Iterator[None]:
        """Turn Redis failures into one clear exception."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise CronUnavailableError(
                f"cannot {what}: Redis at {describe(self.client)} did not answer ({redact(str(exc))})"
            ) from None
        except redis.ResponseError as exc:
            raise CronConfigurationError(f"cannot {what}: Redis refused ({redact(str(exc))})") from None


def _stored(bound: BoundSchedule, *, created: int, updated: int, now: int) -> RuntimeSchedule:
    return RuntimeSchedule(schedule=bound, created_ms=created, updated_ms=updated, as_of_ms=now)


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
        "grace": bound.grace,
        "max_runtime": bound.max_runtime,
        "failure_threshold": bound.failure_threshold,
    }


def _bind_definition(data: dict[str, Any]) -> BoundSchedule:
    """A definition (format 1) bound by the same rules as ``cron=``."""
    name, args, kwargs, options = data["name"], data["args"], data["kwargs"], data["options"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CronScheduleError(f"actor {data['actor']!r}: bad runtime schedule name {name!r}")
    if not isinstance(args, list):
        raise CronScheduleError(f"args must be a list, got {args!r}")
    revision = int(data.get("rev", 0))
    for field in _MONITORING_FIELDS:  # absent from definitions stored before run monitoring
        data.setdefault(field, None)
    shared = _shared_fields(data)
    offset, start, end = data["offset"], data["start"], data["end"]
    if not (
        type(kwargs) is dict
        and type(options) is dict
        and _PLAIN.issuperset(map(type, shared))
        and type(offset) is int
        and type(start) in _BOUND_TYPES
        and type(end) in _BOUND_TYPES
        and (offset == 0 or data["every"] is not None)
        and type(data["timezone"]) is str
    ):
        # Anything unusual takes the whole rule book, and its error.
        return _bind_fully(data, revision)
    try:
        zone_name, zone = _zone(data["timezone"])
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
    values[_AT_TIMEZONE] = zone_name
    values[_AT_ZONE] = zone
    values[_AT_NAME] = name
    values[_AT_ARGS] = tuple(args)
    values[_AT_KWARGS] = kwargs
    values[_AT_OPTIONS] = dict(template.options)  # a private copy
    values[_AT_REVISION] = revision
    if offset or start is not None or end is not None:
        where = f"actor {template.actor_name!r}, runtime schedule {name!r}"
        if offset:
            values[_AT_EXPRESSION] = interval_label(where, template.every, offset)
            values[_AT_OFFSET] = offset
        values[_AT_START], values[_AT_END] = check_bounds(where, start, end)
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
        raise CronScheduleError(f"actor must be a string, got {actor_name!r}")
    _check_actor_name(actor_name)
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
    _AT_TIMEZONE,
    _AT_ZONE,
    _AT_EXPRESSION,
    _AT_OFFSET,
    _AT_START,
    _AT_END,
) = map(
    _INIT_FIELDS.index,
    ("name", "args", "kwargs", "options", "revision", "timezone", "zone", "expression", "offset", "start", "end"),
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
    return (sys.intern(name) if zone is not UTC_ZONE else "UTC"), zone


# (The expression needs none: the normalised expression comes from a cache.)
_SHARED_STRINGS = ("actor", "queue", "timezone", "catch_up", "overlap")


def _actor_name(actor: object) -> str:
    name = getattr(actor, "actor_name", actor)
    if not isinstance(name, str):
        raise CronScheduleError(f"runtime schedule: actor must be an actor or an actor name, got {actor!r}")
    _check_actor_name(name)
    return name


def _check_actor_name(name: str) -> None:
    # dramatiq itself accepts any actor name; runtime ids are ``actor:name``
    # and declared ids ``actor/...``, so these two characters would make an
    # id ambiguous.
    if not name or ":" in name or "/" in name:
        raise CronScheduleError(f"runtime schedule: actor name {name!r} must be non-empty, without ':' or '/'")


def _describe_actor(actor: object) -> str:
    return repr(getattr(actor, "actor_name", actor))


def _schedule_id(actor: object, name: object) -> str:
    actor_name = _actor_name(actor)
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CronScheduleError(
            f"runtime schedule of {actor_name!r}: name must be 1 to 64 letters, digits, '_', '.' or '-', got {name!r}"
        )
    return f"{actor_name}:{name}"
