"""Runtime definitions on a :class:`~.server.MemoryServer`: the leader's reads and the operators' writes."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Sequence

from dramatiq.logging import get_logger

from ...errors import CronScheduleError
from ...schedules.schedule import DEFAULT_CATCH_UP_WINDOW, BoundSchedule, CatchUp
from ..codes import Outcome
from ..runtime import RuntimeSchedules, StoredProblem
from ..runtime_definition import ActorInfo, RuntimePage, RuntimeSchedule, already_exists, check_listing, schedule_id_of
from .server import MemoryServer, parse_entry

__all__ = ["MemoryRuntime", "MemoryRuntimeSchedules"]


class MemoryRuntime:
    """:class:`~..abc.RuntimeReads` on a :class:`MemoryServer`."""

    def __init__(self, server: MemoryServer, *, history_length: int) -> None:
        self.server = server
        self.history_length = history_length

    def version(self) -> int:
        return int(str(self.server.call("version", lambda: self.server.runtime_version)))

    def load_all(self) -> tuple[int, dict[str, BoundSchedule]]:
        def run() -> tuple[int, dict[str, BoundSchedule]]:
            return self.server.runtime_version, dict(self.server.runtime)

        loaded = self.server.call("load_all", run)
        assert isinstance(loaded, tuple)
        return loaded

    def changes_since(self, version: int) -> tuple[int, dict[str, BoundSchedule | None]]:
        def run() -> tuple[int, dict[str, BoundSchedule | None]]:
            s = self.server
            if s.runtime_version < version:
                return s.runtime_version, {}
            changed = sorted((v, sid) for sid, v in s.runtime_changes.items() if v > version)
            return s.runtime_version, {sid: s.runtime.get(sid) for _, sid in changed}

        changes = self.server.call("changes_since", run)
        assert isinstance(changes, tuple)
        return changes

    def drop_stale(self, ticks: Sequence[tuple[BoundSchedule, int, str]]) -> list[bool]:
        def run() -> list[bool]:
            s = self.server
            now = s.now_ms()
            out = []
            for schedule, tick, message_id in ticks:
                stale = s.runtime_revs.get(schedule.id) != schedule.revision
                if stale:
                    detail = "its enqueue had failed, and the definition was removed or replaced before a retry"
                    s.add_history(
                        self.history_length, schedule.id, tick, Outcome.DROPPED.value, now, 0, detail, message_id
                    )
                out.append(stale)
            return out

        dropped = self.server.call("drop_stale", run)
        assert isinstance(dropped, list)
        return dropped

    def retire(self, schedules: Sequence[BoundSchedule]) -> list[str]:
        def run() -> list[str]:
            s = self.server
            out = []
            for schedule in schedules:
                assert schedule.at is not None
                entry = parse_entry(s.ticks.get(schedule.id))
                if s.runtime_revs.get(schedule.id) != schedule.revision or entry is None or entry[0] < schedule.at:
                    continue
                s.remove_runtime(schedule.id)
                out.append(schedule.id)
            return out

        retired = self.server.call("retire", run)
        assert isinstance(retired, list)
        return retired


class MemoryRuntimeSchedules(RuntimeSchedules):
    """Runtime schedule definitions on a :class:`MemoryServer`: the calls
    of :class:`~..runtime.RuntimeSchedules` (``add``, ``add_many``,
    ``update``, ``remove``, ``get``, ``list``, ``ids``, ``get_many``,
    ``count_by_actor``, ``version``, ``survey``), checked by the same rules, on the
    server's clock.  Parameters as :class:`~..runtime.RuntimeSchedules`'s,
    with the server in place of the client and keys."""

    def __init__(
        self,
        server: MemoryServer,
        *,
        resolve_actor: Callable[[object], ActorInfo],
        timezone: str = "UTC",
        catch_up: CatchUp = "each",
        catch_up_window: int = DEFAULT_CATCH_UP_WINDOW,
        history_length: int = 10_000,
    ) -> None:
        # Not RuntimeSchedules.__init__: no client and no scripts; only the checks are shared.
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.resolve_actor = resolve_actor
        self.timezone = timezone
        self.catch_up: CatchUp = catch_up
        self.catch_up_window = catch_up_window
        self.history_length = history_length
        self.server = server
        self._stored: dict[str, RuntimeSchedule] = {}

    def _current(self) -> dict[str, RuntimeSchedule]:
        """The stored schedules, less the one-shots the leader retired."""
        for sid in [sid for sid in self._stored if sid not in self.server.runtime]:
            del self._stored[sid]
        return self._stored

    def _write_prepared(
        self, prepared: Sequence[tuple[BoundSchedule, str]], condition: str
    ) -> builtins.list[RuntimeSchedule]:
        for bound, _ in prepared:
            before = self._current().get(bound.id)
            if condition == "new" and before is not None:
                raise already_exists(bound.id)
            if condition not in ("", "new") and (before is None or str(before.schedule.revision) != condition):
                raise CronScheduleError(f"runtime schedule {bound.id!r} changed while being updated; try again")
        now = self.server.now_ms()
        out = []
        for schedule in self.server.add_runtime([bound for bound, _ in prepared], history_length=self.history_length):
            before = self._stored.get(schedule.id)
            stored = RuntimeSchedule(
                schedule=schedule,
                created_ms=now if before is None else before.created_ms,
                updated_ms=now,
                as_of_ms=now,
                revision=1 if before is None else before.revision + 1,
            )
            self._stored[schedule.id] = stored
            out.append(stored)
        return out

    def remove(self, actor: object, name: str) -> bool:
        sid = schedule_id_of(actor, name)
        self.server.remove_runtime(sid)
        return self._stored.pop(sid, None) is not None

    def get(self, actor: object, name: str) -> RuntimeSchedule | None:
        found = self._current().get(schedule_id_of(actor, name))
        return None if found is None else dataclasses.replace(found, as_of_ms=self.server.now_ms())

    def list(
        self, *, actor: object | None = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> RuntimePage:
        owner = check_listing(actor, search, cursor, limit)
        ids = sorted(i for i in self._current() if owner is None or i.partition(":")[0] == owner)
        total = None if search is not None else len(ids)
        ids = [i for i in ids if (search is None or search.lower() in i.lower()) and (cursor is None or i > cursor)]
        page = ids[:limit]
        now = self.server.now_ms()
        items = [dataclasses.replace(self._stored[i], as_of_ms=now) for i in page]
        return RuntimePage(items=items, cursor=page[-1] if len(ids) > limit else None, total=total)

    def ids(self) -> builtins.list[str]:
        return sorted(self._current())

    def get_many(self, schedule_ids: Sequence[str]) -> builtins.list[RuntimeSchedule]:
        current = self._current()
        return [current[i] for i in schedule_ids if i in current]

    def version(self) -> int:
        return self.server.runtime_version

    def survey(self) -> tuple[builtins.list[BoundSchedule], builtins.list[StoredProblem]]:
        current = self._current()  # (stored bound: none is unreadable)
        return [current[i].schedule for i in sorted(current)], []

    def count_by_actor(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for sid in sorted(self._current()):
            actor = sid.partition(":")[0]
            out[actor] = out.get(actor, 0) + 1
        return out
