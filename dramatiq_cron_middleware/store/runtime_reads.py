"""Reading runtime schedules from Redis: one definition, a page in id
order, the ids, counts per actor, and what the leader reads to learn of
changes (the version, the changes since one, everything)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from dramatiq.logging import get_logger

from ..errors import CronConfigurationError, CronUnavailableError
from ..schedules.schedule import BoundSchedule
from .codes import decode, load_script
from .collector import collector_paused
from .connection import credentials_refused, describe, redact
from .keys import Keys
from .read_ahead import read_ahead
from .runtime_definition import (
    RuntimePage,
    RuntimeSchedule,
    StoredProblem,
    check_listing,
    describe_problems,
    read_definition,
    schedule_id_of,
    stored_schedule,
)

__all__ = ["RuntimeReader", "redis_errors"]


# Entries per HSCAN / change page / lexical page.
_PAGE = 1000


class RuntimeReader:
    """The read side of :class:`~.runtime.RuntimeSchedules`.

    Parameters:
      client(redis.Redis): A client with short timeouts and
        ``decode_responses=True``.
      keys(Keys): The scheduler's key names.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        # Named after the class's own module: store.runtime.RuntimeSchedules, as before the split.
        self.logger = get_logger(type(self).__module__, type(self))  # type: ignore[no-untyped-call]
        self.client = client
        self.keys = keys
        self._changes = load_script(client, "runtime_changes")
        self._read = load_script(client, "runtime_read")

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
        with redis_errors(self.client, "read a runtime schedule"):
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
        actor_name = check_listing(actor, search, cursor, limit)
        low, high = "-", "+"
        if actor_name is not None:
            # Ids of one actor are exactly ``actor:...``, and ';' follows ':'.
            low, high = f"[{actor_name}:", f"({actor_name};"
        if cursor is not None and (low == "-" or cursor > low[1:]):
            low = "(" + cursor
        total: int | None = None
        with redis_errors(self.client, "list runtime schedules"):
            ids = self._page_ids(low, high, search, limit + 1)
            more = len(ids) > limit
            ids = ids[:limit]
            reply = decode(self._read(keys=[self.keys.runtime], args=ids))
            now, texts = reply.server_ms, reply.payload
            if search is None:
                count: Any = (
                    self.client.zcard(self.keys.runtime_ids)
                    if actor_name is None
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
        with redis_errors(self.client, "list runtime schedule ids"):
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
        with redis_errors(self.client, "read runtime schedules"):
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
        with redis_errors(self.client, "count runtime schedules"):
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
        with redis_errors(self.client, "read the runtime schedules' version"):
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
        with redis_errors(self.client, "read runtime schedule changes"):
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
        with redis_errors(self.client, "load the runtime schedules"), collector_paused():
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
        return self.survey()[1]

    def survey(self) -> tuple[builtins.list[BoundSchedule], builtins.list[StoredProblem]]:
        """Every stored schedule that can be read, and :meth:`recheck`'s
        problems, both in id order, from one read of every definition (each
        bound once): what the operators' reads of every schedule's health
        take.  Nothing is logged.

        Raises:
          CronUnavailableError: Redis did not answer.
        """
        found: dict[str, tuple[BoundSchedule | None, StoredProblem | None]] = {}
        with redis_errors(self.client, "check the runtime schedules"), collector_paused():
            for page in read_ahead(self._scan()):
                for schedule_id, text in page.items():  # (HSCAN may return an id twice)
                    found[schedule_id] = self._recheck(schedule_id, text)
        read = [found[i] for i in sorted(found)]
        return [b for b, _ in read if b is not None], [p for _, p in read if p is not None]

    def _recheck(self, schedule_id: str, text: str) -> tuple[BoundSchedule | None, StoredProblem | None]:
        """A stored definition as a schedule (None when it cannot be read),
        and what is wrong with it, if anything."""
        try:
            bound, stored = read_definition(schedule_id, text)
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

    def _bound(self, schedule_id: str, text: str) -> BoundSchedule | None:
        """A stored definition as a schedule, or None after one WARNING."""
        try:
            bound = read_definition(schedule_id, text)[0]
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
        return stored_schedule(
            bound,
            created=int(data.get("created", 0)),
            updated=int(data.get("updated", 0)),
            now=now,
            revision=int(data.get("revision", 1)),
        )


@contextmanager
def redis_errors(client: redis.Redis, what: str) -> Iterator[None]:
    """Turn Redis failures into one clear exception."""
    try:
        yield
    except (redis.AuthenticationError, redis.ResponseError) as exc:
        refused = credentials_refused(exc, describe(client))
        if refused is None and isinstance(exc, redis.ResponseError):
            raise CronConfigurationError(f"cannot {what}: Redis refused ({redact(str(exc))})") from None
        raise CronConfigurationError(f"cannot {what}: {refused or redact(str(exc))}") from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise CronUnavailableError(
            f"cannot {what}: Redis at {describe(client)} did not answer ({redact(str(exc))})"
        ) from None
