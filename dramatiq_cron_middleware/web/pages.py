"""What each page of the dashboard shows, gathered from Redis and the app.

Each function here reads what one page needs and returns plain data for its
template; none of them writes.  A page of schedules costs the same whatever
the number of schedules: the page's rows are sliced first, then their
ledger entries are read in one HMGET and their next ticks computed (the
schedule module memoises those).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from ..ops.control import (
    Candidate,
    Control,
    HistoryEntry,
    HistoryPage,
    LastDecision,
    LeaderInfo,
    RuntimeCatalogue,
    Target,
    find_runtime,
    paused_by,
)
from ..ops.format import span
from ..schedules.schedule import NEVER, BoundSchedule
from ..store.timing import Timing
from .chart import lag_chart, lag_ms
from .describe import describe

__all__ = [
    "Filters",
    "HistoryView",
    "Overview",
    "Row",
    "RuntimeCatalogue",
    "SchedulesView",
    "find_runtime",
    "history_view",
    "overview",
    "schedules_view",
]

#: How many next fire times a schedule row shows.
NEXT_RUNS = 3
#: Page sizes a visitor may ask for; the first is the default.
PAGE_SIZES = (50, 20, 100, 200)
#: Entries per page of a schedule's history.
HISTORY_PAGE = 50


@dataclasses.dataclass(frozen=True)
class Filters:
    """The schedules page's search, filters and position, from the query
    string.

    ``cursor`` is where the page starts: ``""`` the beginning, ``c:<n>`` the
    n-th matching code schedule, ``r:<id>`` the runtime schedule after that
    id (the runtime listing is keyed by id, so a page costs the same
    whatever the number of schedules).  ``at`` is the position of the first row, shown
    only.
    """

    query: str = ""
    source: str = "all"
    state: str = "all"
    cursor: str = ""
    at: int = 0
    per_page: int = PAGE_SIZES[0]

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Filters:
        """Read the filters leniently: an unknown value means the default."""
        source = params.get("source", "all")
        state = params.get("state", "all")
        cursor = params.get("cursor", "")
        if not (cursor.startswith("r:") or (cursor.startswith("c:") and cursor[2:].isdigit())):
            cursor = ""
        at = params.get("at", "0")
        try:
            per_page = int(params.get("per_page", str(PAGE_SIZES[0])))
        except ValueError:
            per_page = PAGE_SIZES[0]
        return cls(
            query=params.get("q", "").strip()[:200],
            source=source if source in ("all", "code", "runtime") else "all",
            state=state if state in ("all", "paused", "active") else "all",
            cursor=cursor,
            at=int(at) if at.isdigit() and cursor else 0,
            per_page=per_page if per_page in PAGE_SIZES else PAGE_SIZES[0],
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """The query parameters of these filters with ``changes``, defaults
        left out so links stay short."""
        merged = dataclasses.replace(self, **changes)
        out = {"q": merged.query, "source": merged.source, "state": merged.state, "cursor": merged.cursor}
        out = {k: v for k, v in out.items() if v and v != "all"}
        if merged.cursor and merged.at:
            out["at"] = str(merged.at)
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
    """A page of schedules; ``total`` is None when it is unknown (a search
    of runtime schedules stops reading once the page is full)."""

    rows: list[Row]
    total: int | None
    filters: Filters
    next_cursor: str | None
    now_ms: int
    runtime_known: bool


def _matches(schedule: BoundSchedule, needle: str) -> bool:
    return (
        needle in schedule.actor_name.lower()
        or needle in schedule.name.lower()
        or needle in schedule.expression
        or needle in schedule.timezone.lower()
    )


def words(schedule: BoundSchedule) -> str:
    """The schedule's timing in words."""
    if schedule.every is not None:
        text = f"Every {span(schedule.every)}"
        return text + (f", {span(schedule.offset)} into each interval" if schedule.offset else "")
    return describe(schedule.expression, hash_id=f"{schedule.actor_name}/{schedule.name}")


def upcoming(schedule: BoundSchedule, now_ms: int, count: int = NEXT_RUNS) -> list[int]:
    """The next ``count`` ticks after ``now_ms`` (fewer past the schedule's end)."""
    out, tick = [], now_ms
    for _ in range(count):
        tick = schedule.next_after(tick)
        if tick >= NEVER:
            break
        out.append(tick)
    return out


def schedules_view(
    control: Control,
    code: Sequence[BoundSchedule],
    runtime: RuntimeCatalogue | None,
    filters: Filters,
) -> SchedulesView:
    """The schedules page: code schedules first (declaration order), then
    runtime ones (by id), filtered, one page of them from the cursor."""
    now = control.server_ms()
    paused = control.paused()
    needle = filters.query.lower()
    size = filters.per_page

    def state_ok(s: BoundSchedule) -> bool:
        return filters.state == "all" or (paused_by(s, paused) is not None) == (filters.state == "paused")

    picked: list[BoundSchedule] = []
    next_cursor: str | None = None
    total: int | None = 0
    code_matches: list[BoundSchedule] = []
    if filters.source in ("all", "code"):
        code_matches = [s for s in code if (not needle or _matches(s, needle)) and state_ok(s)]
        total = len(code_matches)
    with_runtime = runtime is not None and filters.source in ("all", "runtime")
    after: str | None = None
    if not filters.cursor.startswith("r:"):
        first = int(filters.cursor[2:]) if filters.cursor.startswith("c:") else 0
        picked = code_matches[first : first + size]
        if first + size < len(code_matches):
            next_cursor = f"c:{first + size}"
    else:
        after = filters.cursor[2:] or None
    if runtime is not None and with_runtime:
        if filters.state == "paused":
            # Only members of the (small) paused set can be paused: look
            # those up instead of reading the whole catalogue.
            ids = sorted(p for p in paused if ":" in p and "/" not in p)
            found = [s for s in (find_runtime(runtime, i) for i in ids) if s is not None]
            found = [s for s in found if not needle or _matches(s, needle)]
            total = None if total is None else total + len(found)
            rest = [s for s in found if after is None or s.id > after]
            room = size - len(picked)
            if next_cursor is None and room > 0:
                picked += rest[:room]
                if len(rest) > room:
                    next_cursor = "r:" + rest[room - 1].id
        else:
            room = size - len(picked)
            page = runtime.list(search=filters.query or None, cursor=after, limit=max(room, 1))
            total = None if total is None or page.total is None else total + page.total
            if next_cursor is None and room > 0:
                items = [r.schedule for r in page.items]
                picked += [s for s in items if state_ok(s)]
                if page.cursor is not None:
                    next_cursor = "r:" + page.cursor
            elif next_cursor is None and page.items:
                next_cursor = "r:"
    decisions = control.decisions([s.id for s in picked])
    rows = [
        Row(
            schedule=s,
            words=words(s),
            next_ms=upcoming(s, now),
            last=decisions.get(s.id),
            paused_by=paused_by(s, paused),
        )
        for s in picked
    ]
    return SchedulesView(
        rows=rows,
        total=total,
        filters=filters,
        next_cursor=next_cursor,
        now_ms=now,
        runtime_known=runtime is not None,
    )


@dataclasses.dataclass(frozen=True)
class Overview:
    """The overview page: leader, candidates, Redis, warnings."""

    where: str
    reachable: bool
    error: str | None
    round_trip_ms: float | None
    now_ms: int | None
    leader: LeaderInfo | None
    healthy: bool
    candidates: list[Candidate]
    show_fingerprint: bool
    show_version: bool
    warnings: list[str]
    schedules: int
    runtime_schedules: int | None
    paused: int
    lock_ttl: int

    def is_leader(self, candidate: Candidate) -> bool:
        """Whether this candidate holds the lease."""
        return self.leader is not None and candidate.candidate_id == self.leader.candidate.rsplit("|", 1)[-1]


def overview(
    control: Control, *, where: str, schedules: int, runtime: RuntimeCatalogue | None, lock_ttl: int
) -> Overview:
    """The overview page; an unreachable Redis is shown, not raised."""
    runtime_count: int | None = None
    try:
        if runtime is not None:
            runtime_count = runtime.list(limit=1).total
        round_trip = control.round_trip_ms()
        now = control.server_ms()
        leader = control.leader()
        ttl = leader.ttl_ms if leader else lock_ttl
        candidates = control.candidates(since_ms=now - Timing.for_lease(ttl).candidate_listed_ms)
        paused = len(control.paused())
        policy = control.maxmemory_policy()
        lacking = control.replicas_lacking()
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        return Overview(
            where=where,
            reachable=False,
            error=type(exc).__name__,
            round_trip_ms=None,
            now_ms=None,
            leader=None,
            healthy=False,
            candidates=[],
            show_fingerprint=False,
            show_version=False,
            warnings=[f"Redis at {where} cannot be reached: nothing below is current."],
            schedules=schedules,
            runtime_schedules=None,
            paused=0,
            lock_ttl=lock_ttl,
        )
    healthy = leader is not None and now - leader.renewed_ms <= leader.ttl_ms
    fingerprints = {getattr(c, "fingerprint", None) for c in candidates} - {None, ""}
    versions = {getattr(c, "version", None) for c in candidates} - {None, ""}
    warnings = []
    if leader is None:
        warnings.append("No process holds the lease: no tick fires until one does.")
    elif not healthy:
        warnings.append("The leader has not renewed its lease within its length.")
    if not candidates:
        warnings.append("No candidate was seen recently: are the workers running?")
    if lacking is not None:
        warnings.append(lacking.describe(now) + ".")
    if len(fingerprints) > 1:
        warnings.append(
            f"Candidates declare different schedule sets ({len(fingerprints)} fingerprints): "
            "a deploy is under way, or some workers run other code."
        )
    if len(versions) > 1:
        warnings.append(f"Candidates run different versions: {', '.join(sorted(map(str, versions)))}.")
    if policy is not None and policy.startswith("allkeys-"):
        warnings.append(
            f"maxmemory-policy is {policy}: Redis can evict the ledger and the epoch counter (schedules then "
            "restart from now and ticks can be lost). Use noeviction."
        )
    return Overview(
        where=where,
        reachable=True,
        error=None,
        round_trip_ms=round_trip,
        now_ms=now,
        leader=leader,
        healthy=healthy,
        candidates=candidates,
        show_fingerprint=bool(fingerprints),
        show_version=bool(versions),
        warnings=warnings,
        schedules=schedules,
        runtime_schedules=runtime_count,
        paused=paused,
        lock_ttl=lock_ttl,
    )


@dataclasses.dataclass(frozen=True)
class HistoryRow:
    """One history entry with its lag worked out."""

    entry: HistoryEntry
    lag_ms: int | None


@dataclasses.dataclass(frozen=True)
class HistoryView:
    """A page of one schedule's history."""

    schedule_id: str
    schedule: BoundSchedule | None
    source: str | None
    rows: list[HistoryRow]
    page: HistoryPage
    chart: str
    paused_by: Target | None
    last: LastDecision | None
    next_ms: list[int]
    now_ms: int

    @property
    def target(self) -> Target | None:
        """The schedule, as the page's buttons name it (None if unknown)."""
        return None if self.schedule is None else Target.of(self.schedule)


def history_view(
    control: Control, schedule_id: str, schedule: BoundSchedule | None, source: str | None, *, before: str | None
) -> HistoryView:
    """A schedule's history page: entries older than ``before``, newest
    first, and the chart of the same entries."""
    now = control.server_ms()
    page = control.schedule_history(schedule_id, limit=HISTORY_PAGE, before=before)
    paused = control.paused()
    stopped_by = None if schedule is None else paused_by(schedule, paused)
    return HistoryView(
        schedule_id=schedule_id,
        schedule=schedule,
        source=source,
        rows=[HistoryRow(entry=e, lag_ms=lag_ms(e)) for e in page.entries],
        page=page,
        chart=lag_chart(page.entries),
        paused_by=stopped_by,
        last=control.decisions([schedule_id]).get(schedule_id),
        next_ms=[] if schedule is None else upcoming(schedule, now),
        now_ms=now,
    )
