"""What each page of the dashboard shows, gathered from Redis and the app.

Each function here reads what one page needs and returns plain data for its
template; none of them writes.  A page of schedules costs the same whatever
the number of schedules: the page's rows are sliced first, then their
ledger entries are read in one HMGET and their next ticks computed (the
schedule module memoises those).
"""

from __future__ import annotations

import dataclasses
import heapq
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..audit import ACTIONS, Action
from ..monitoring.records import HEALTH_STATES
from ..schedules.ids import parse_id, whole_actor
from ..schedules.schedule import NEVER, BoundSchedule
from ..service import Cron
from ..status import pause_end, upcoming
from ..targets import Target, paused_by
from ..times import span, when
from .chart import lag_chart
from .describe import describe

if TYPE_CHECKING:
    from ..store.operator import HistoryEntry, HistoryPage, LastDecision
    from ..store.runtime import RuntimeSchedules

__all__ = [
    "HEALTH_FILTERS",
    "Filters",
    "HistoryView",
    "NextRun",
    "Row",
    "RuntimeIndex",
    "SchedulesView",
    "declared_view",
    "history_view",
    "matches",
    "natural_key",
    "next_to_run",
    "paged",
    "rows_of",
    "schedules_view",
]

#: Page sizes a visitor may ask for; the first is the default.
PAGE_SIZES = (50, 20, 100, 200)
#: Entries per page of a schedule's history.
HISTORY_PAGE = 50
#: The schedules page's health filter: any, any problem, or one state.
HEALTH_FILTERS = ("all", "problems", *HEALTH_STATES)


@dataclasses.dataclass(frozen=True)
class Filters:
    """The schedules page's search, filters and page, from the query string.

    ``page`` counts from 1; a page past the last shows the last.
    """

    query: str = ""
    source: str = "all"
    state: str = "all"
    page: int = 1
    per_page: int = PAGE_SIZES[0]
    #: The health filter (``HEALTH_FILTERS``): ``all``, ``problems`` or one
    #: health state.
    health: str = "all"

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Filters:
        """Read the filters leniently: an unknown value means the default."""
        source = params.get("source", "all")
        state = params.get("state", "all")
        page = params.get("page", "1")
        try:
            per_page = int(params.get("per_page", str(PAGE_SIZES[0])))
        except ValueError:
            per_page = PAGE_SIZES[0]
        return cls(
            query=params.get("q", "").strip()[:200],
            source=source if source in ("all", "code", "runtime") else "all",
            state=state if state in ("all", "paused", "active") else "all",
            page=max(1, int(page)) if page.isdigit() and len(page) < 9 else 1,
            per_page=per_page if per_page in PAGE_SIZES else PAGE_SIZES[0],
            health=health if (health := params.get("health", "all")) in HEALTH_FILTERS else "all",
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """The query parameters of these filters with ``changes``, defaults
        left out so links stay short."""
        merged = dataclasses.replace(self, **changes)
        out = {"q": merged.query, "source": merged.source, "state": merged.state, "health": merged.health}
        out = {k: v for k, v in out.items() if v and v != "all"}
        if merged.page > 1:
            out["page"] = str(merged.page)
        if merged.per_page != PAGE_SIZES[0]:
            out["per_page"] = str(merged.per_page)
        return out


@dataclasses.dataclass(frozen=True)
class Row:
    """One schedule as the schedules page shows it."""

    schedule: BoundSchedule
    words: str
    next_ms: list[int]
    last: LastDecision | None
    #: What a resume would have to name: the schedule, or its actor (paused
    #: as a whole), or None when running.
    paused_by: Target | None
    #: When that pause ends by itself (epoch ms), None: until resumed.
    paused_until: int | None = None

    @property
    def source(self) -> str:
        """``code`` or ``runtime``."""
        return self.schedule.source

    @property
    def target(self) -> Target:
        """The row's schedule, as its buttons name it."""
        return Target.of(self.schedule)


@dataclasses.dataclass(frozen=True)
class SchedulesView:
    """A page of schedules, out of ``total`` matching ones.  When Redis
    cannot be reached (``error`` says how), the declared schedules are
    listed with their state unknown and next runs by this machine's clock."""

    rows: list[Row]
    total: int
    filters: Filters
    pages: int
    now_ms: int
    error: str | None = None

    @property
    def first(self) -> int:
        """The position of the page's first row, from 1."""
        return (self.filters.page - 1) * self.filters.per_page + 1


def natural_key(text: str) -> tuple[list[Any], str]:
    """Sorts names as people read them: ``tenant-9`` before ``tenant-10``
    and ``tenant-118`` before ``tenant-1179``; case is ignored, and the text
    itself breaks ties (``r007`` and ``r7``)."""
    # Splitting on runs of digits alternates text and digits (text at even
    # places), so the same places always compare the same types.
    parts: list[Any] = _DIGITS.split(text.lower())
    parts[1::2] = map(int, parts[1::2])
    return (parts, text)


_DIGITS = re.compile(r"(\d+)")
_T = TypeVar("_T")


class RuntimeIndex:
    """The runtime schedules' ids in natural order, and their definitions,
    read again only when the runtime version moved: a page of 10,000
    schedules then costs one GET, a slice and one read of its rows.

    Shared by a dashboard's request threads: each value is replaced whole,
    never changed in place.
    """

    def __init__(self, runtime: RuntimeSchedules) -> None:
        self.runtime = runtime
        self._kept: dict[str, tuple[int, Any]] = {}

    def _of_version(self, what: str, read: Callable[[], _T]) -> _T:
        """``read()``, kept until the version moves (the version is read
        first, so a write in between reads again next time rather than
        being missed)."""
        version = self.runtime.version()
        known, value = self._kept.get(what, (-1, None))
        if known != version:
            value = read()
            self._kept[what] = (version, value)
        return value  # type: ignore[no-any-return]

    def ids(self) -> list[str]:
        """Every id, in natural order."""
        return self._of_version("ids", lambda: sorted(self.runtime.ids(), key=natural_key))

    def read(self, ids: Sequence[str]) -> list[BoundSchedule]:
        """The stored schedules of these ids, in their order (one read)."""
        return [r.schedule for r in self.runtime.get_many(ids)]

    def problems(self) -> list[Any]:
        """The stored definitions this version reads differently or not at
        all (``RuntimeSchedules.recheck``, as ``dramatiq-cron check``)."""
        return self._of_version("survey", self.runtime.survey)[1]

    def schedules(self) -> list[BoundSchedule]:
        """Every stored schedule (for the next-to-run view)."""
        return self._of_version("survey", self.runtime.survey)[0]


def matches(schedule: BoundSchedule, needle: str) -> bool:
    """Whether the search ``needle`` (lower-cased) finds the schedule."""
    return (
        needle in schedule.actor_name.lower()
        or needle in schedule.name.lower()
        or needle in schedule.expression
        or needle in schedule.timezone.lower()
    )


def words(schedule: BoundSchedule) -> str:
    """The schedule's timing in words."""
    if schedule.at is not None:
        return f"Once, at {when(schedule.at, schedule.zone)}"
    if schedule.every is not None:
        text = f"Every {span(schedule.every)}"
        return text + (f", {span(schedule.offset)} into each interval" if schedule.offset else "")
    return describe(schedule.expression, hash_id=schedule.cadence.hash_id)


def schedules_view(
    cron: Cron,
    code: Sequence[BoundSchedule],
    runtime: RuntimeIndex,
    filters: Filters,
) -> SchedulesView:
    """The schedules page: code schedules first (declaration order), then
    runtime ones (natural order of their ids), filtered, one page of them.

    A runtime schedule is matched by its id (``actor:name``), so a search
    or a filter reads ids only; the page's own definitions are read last.
    """
    now = cron.server_ms()
    paused = cron.pauses()
    needle = filters.query.lower()
    size = filters.per_page

    def stopped(actor: str, schedule_id: str) -> bool:
        return schedule_id in paused or whole_actor(actor) in paused

    def state_ok(actor: str, schedule_id: str) -> bool:
        return filters.state == "all" or stopped(actor, schedule_id) == (filters.state == "paused")

    code_matches: list[BoundSchedule] = []
    if filters.source in ("all", "code"):
        code_matches = [s for s in code if (not needle or matches(s, needle)) and state_ok(s.actor_name, s.id)]
    runtime_ids: list[str] = []
    if filters.source in ("all", "runtime"):
        # The actor is parsed out of an id only where the state filter needs it.
        every_state = filters.state == "all"
        runtime_ids = [
            i
            for i in runtime.ids()
            if (not needle or needle in i.lower()) and (every_state or state_ok(parse_id(i).actor, i))
        ]
    total = len(code_matches) + len(runtime_ids)
    filters, pages, first = paged(filters, total)
    picked = code_matches[first : first + size]
    wanted = runtime_ids[max(0, first - len(code_matches)) : max(0, first + size - len(code_matches))]
    if wanted:
        picked += runtime.read(wanted)
    return SchedulesView(
        rows=rows_of(cron, picked, now_ms=now, pauses=paused),
        total=total,
        filters=filters,
        pages=pages,
        now_ms=now,
    )


def rows_of(
    cron: Cron, schedules: Sequence[BoundSchedule], *, now_ms: int, pauses: Mapping[str, int | None]
) -> list[Row]:
    """The rows of a page's schedules (their last decisions in one read);
    ``pauses`` is :meth:`Cron.pauses`."""
    decisions = cron.decisions([s.id for s in schedules])
    return [
        Row(
            schedule=s,
            words=words(s),
            next_ms=upcoming(s, now_ms),
            last=decisions.get(s.id),
            paused_by=paused_by(s, pauses),
            paused_until=pause_end(s, pauses),
        )
        for s in schedules
    ]


def declared_view(code: Sequence[BoundSchedule], filters: Filters, *, now_ms: int, error: str) -> SchedulesView:
    """The schedules page when Redis cannot be reached: the declared
    schedules, filtered and paged as usual, next runs by ``now_ms`` (this
    machine's clock), paused state and last outcome unknown."""
    needle = filters.query.lower()
    found = [s for s in code if not needle or matches(s, needle)] if filters.source != "runtime" else []
    filters, pages, first = paged(filters, len(found))
    rows = [
        Row(schedule=s, words=words(s), next_ms=upcoming(s, now_ms), last=None, paused_by=None)
        for s in found[first : first + filters.per_page]
    ]
    return SchedulesView(rows=rows, total=len(found), filters=filters, pages=pages, now_ms=now_ms, error=error)


def paged(filters: Filters, total: int) -> tuple[Filters, int, int]:
    """The filters with their page moved back onto the last when past it,
    the number of pages, and the index of the page's first row."""
    pages = max(1, -(-total // filters.per_page))
    filters = dataclasses.replace(filters, page=min(filters.page, pages))
    return filters, pages, (filters.page - 1) * filters.per_page


#: How many schedules the next-to-run view lists.
NEXT_TO_RUN = 50


@dataclasses.dataclass(frozen=True)
class NextRun:
    """One line of the next-to-run view."""

    next_ms: int
    schedule: BoundSchedule
    words: str
    #: What a resume would have to name when the schedule is paused.
    paused_by: Target | None = None
    #: When that pause ends by itself (None: until resumed, or not paused).
    paused_until: int | None = None


def next_to_run(
    cron: Cron, code: Sequence[BoundSchedule], runtime: RuntimeIndex, *, limit: int = NEXT_TO_RUN
) -> tuple[int, list[NextRun]]:
    """The ``limit`` schedules that fire soonest, declared and runtime
    together, soonest first (paused ones included and marked: pausing skips
    ticks, it does not move them); returns the server's now and the list."""
    now = cron.server_ms()
    pauses = cron.pauses()
    every = [*code, *runtime.schedules()]
    soonest = heapq.nsmallest(
        limit, ((s.next_after(now), natural_key(s.id), s) for s in every), key=lambda t: (t[0], t[1])
    )
    return now, [
        NextRun(
            next_ms=t, schedule=s, words=words(s), paused_by=paused_by(s, pauses), paused_until=pause_end(s, pauses)
        )
        for t, _, s in soonest
        if t < NEVER
    ]


@dataclasses.dataclass(frozen=True)
class HistoryView:
    """A page of one schedule's history."""

    schedule_id: str
    schedule: BoundSchedule | None
    source: str | None
    rows: list[HistoryEntry]
    page: HistoryPage
    chart: str
    paused_by: Target | None
    last: LastDecision | None
    next_ms: list[int]
    now_ms: int
    #: When the pause ends by itself (epoch ms), None: until resumed.
    paused_until: int | None = None

    @property
    def target(self) -> Target | None:
        """The schedule, as the page's buttons name it (None if unknown)."""
        return None if self.schedule is None else Target.of(self.schedule)


def history_view(
    cron: Cron, schedule_id: str, schedule: BoundSchedule | None, source: str | None, *, before: str | None
) -> HistoryView:
    """A schedule's history page: entries older than ``before``, newest
    first, and the chart of the same entries."""
    now = cron.server_ms()
    page = cron.schedule_history(schedule_id, limit=HISTORY_PAGE, before=before)
    paused = cron.pauses()
    stopped_by = None if schedule is None else paused_by(schedule, paused)
    return HistoryView(
        schedule_id=schedule_id,
        schedule=schedule,
        source=source,
        rows=page.entries,
        page=page,
        # The chart is of ticks: an operator's action (but a trigger, which
        # is a tick too) is listed, not drawn.
        chart=lag_chart([e for e in page.entries if e.outcome not in ACTIONS or e.outcome == Action.TRIGGER]),
        paused_by=stopped_by,
        last=cron.decisions([schedule_id]).get(schedule_id),
        next_ms=[] if schedule is None else upcoming(schedule, now),
        now_ms=now,
        paused_until=None if schedule is None else pause_end(schedule, paused),
    )
