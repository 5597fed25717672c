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
from typing import Any, Protocol

import redis

from ..control import Candidate, Control, HistoryEntry, HistoryPage, LastDecision, LeaderInfo
from ..schedule import BoundSchedule
from .chart import lag_chart, lag_ms
from .describe import describe

__all__ = [
    "Filters",
    "HistoryView",
    "Overview",
    "Row",
    "RuntimeCatalogue",
    "SchedulesView",
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


class RuntimeCatalogue(Protocol):
    """What the dashboard needs of the runtime schedules (issue 12): a count
    and a slice, both honouring a search text, and a lookup by identity."""

    def count(self, *, query: str) -> int:
        """How many runtime schedules match ``query``."""

    def slice(self, *, query: str, offset: int, limit: int) -> list[BoundSchedule]:
        """Up to ``limit`` matching runtime schedules from ``offset``, in a
        stable order."""

    def find(self, schedule_id: str) -> BoundSchedule | None:
        """The runtime schedule with this identity, if any."""


@dataclasses.dataclass(frozen=True)
class Filters:
    """The schedules page's search, filters and page, from the query string."""

    query: str = ""
    source: str = "all"
    state: str = "all"
    page: int = 1
    per_page: int = PAGE_SIZES[0]

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Filters:
        """Read the filters leniently: an unknown value means the default."""
        source = params.get("source", "all")
        state = params.get("state", "all")
        try:
            page = max(int(params.get("page", "1")), 1)
        except ValueError:
            page = 1
        try:
            per_page = int(params.get("per_page", str(PAGE_SIZES[0])))
        except ValueError:
            per_page = PAGE_SIZES[0]
        return cls(
            query=params.get("q", "").strip()[:200],
            source=source if source in ("all", "code", "runtime") else "all",
            state=state if state in ("all", "paused", "active") else "all",
            page=page,
            per_page=per_page if per_page in PAGE_SIZES else PAGE_SIZES[0],
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """The query parameters of these filters with ``changes``, defaults
        left out so links stay short."""
        merged = dataclasses.replace(self, **changes)
        out = {"q": merged.query, "source": merged.source, "state": merged.state}
        out = {k: v for k, v in out.items() if v and v != "all"}
        if merged.page != 1:
            out["page"] = str(merged.page)
        if merged.per_page != PAGE_SIZES[0]:
            out["per_page"] = str(merged.per_page)
        return out


@dataclasses.dataclass(frozen=True)
class Row:
    """One schedule as the schedules page shows it."""

    schedule: BoundSchedule
    source: str
    words: str
    next_ms: list[int]
    last: LastDecision | None
    #: What a resume would have to name: the schedule id or its actor (paused
    #: as a whole), or None when running.
    paused_by: str | None


@dataclasses.dataclass(frozen=True)
class SchedulesView:
    """A page of schedules."""

    rows: list[Row]
    total: int
    filters: Filters
    now_ms: int
    runtime_known: bool

    @property
    def pages(self) -> int:
        """How many pages the filtered schedules fill (at least one)."""
        return max(-(-self.total // self.filters.per_page), 1)


def _paused_by(schedule: BoundSchedule, paused: set[str]) -> str | None:
    """What is paused that stops this schedule: its id, its actor, or nothing."""
    if schedule.id in paused:
        return schedule.id
    return schedule.actor_name if schedule.actor_name in paused else None


def _matches(schedule: BoundSchedule, needle: str) -> bool:
    return (
        needle in schedule.actor_name.lower()
        or needle in schedule.name.lower()
        or needle in schedule.expression
        or needle in schedule.timezone.lower()
    )


def schedules_view(
    control: Control,
    code: Sequence[BoundSchedule],
    runtime: RuntimeCatalogue | None,
    filters: Filters,
) -> SchedulesView:
    """The schedules page: code schedules first (declaration order), then
    runtime ones, filtered, one page of them."""
    now = control.server_ms()
    paused = control.paused()
    needle = filters.query.lower()

    def state_ok(s: BoundSchedule) -> bool:
        if filters.state == "all":
            return True
        is_paused = s.id in paused or s.actor_name in paused
        return is_paused == (filters.state == "paused")

    picked_code: list[BoundSchedule] = []
    if filters.source in ("all", "code"):
        picked_code = [s for s in code if (not needle or _matches(s, needle)) and state_ok(s)]
    offset = (filters.page - 1) * filters.per_page
    page: list[tuple[BoundSchedule, str]] = [(s, "code") for s in picked_code[offset : offset + filters.per_page]]
    total = len(picked_code)
    if runtime is not None and filters.source in ("all", "runtime"):
        if filters.state == "all":
            count = runtime.count(query=filters.query)
            start = max(offset - len(picked_code), 0)
            room = filters.per_page - len(page)
            if room > 0:
                page += [(s, "runtime") for s in runtime.slice(query=filters.query, offset=start, limit=room)]
            total += count
        else:
            # Pause state lives in Redis beside the catalogue: only the
            # paused set's members can be paused, so look those up.
            candidates = [s for s in (runtime.find(p) for p in sorted(paused) if "/" in p) if s is not None]
            if filters.state == "paused":
                matching = [s for s in candidates if not needle or _matches(s, needle)]
                start = max(offset - len(picked_code), 0)
                room = filters.per_page - len(page)
                page += [(s, "runtime") for s in matching[start : start + max(room, 0)]]
                total += len(matching)
            else:
                count = runtime.count(query=filters.query) - len(candidates)
                start = max(offset - len(picked_code), 0)
                room = filters.per_page - len(page)
                if room > 0:
                    ids = {s.id for s in candidates}
                    chunk = runtime.slice(query=filters.query, offset=start, limit=room + len(ids))
                    page += [(s, "runtime") for s in chunk if s.id not in ids][:room]
                total += max(count, 0)
    decisions = control.decisions([s.id for s, _ in page])
    rows = []
    for s, source in page:
        upcoming, tick = [], now
        for _ in range(NEXT_RUNS):
            tick = s.next_after(tick)
            upcoming.append(tick)
        paused_by = _paused_by(s, paused)
        rows.append(
            Row(
                schedule=s,
                source=source,
                words=describe(s.expression, hash_id=f"{s.actor_name}/{s.name}"),
                next_ms=upcoming,
                last=decisions.get(s.id),
                paused_by=paused_by,
            )
        )
    return SchedulesView(rows=rows, total=total, filters=filters, now_ms=now, runtime_known=runtime is not None)


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
    paused: int
    lock_ttl: int

    def is_leader(self, candidate: Candidate) -> bool:
        """Whether this candidate holds the lease."""
        return self.leader is not None and candidate.candidate_id == self.leader.candidate.rsplit("|", 1)[-1]


def overview(control: Control, *, where: str, schedules: int, lock_ttl: int) -> Overview:
    """The overview page; an unreachable Redis is shown, not raised."""
    try:
        round_trip = control.round_trip_ms()
        now = control.server_ms()
        leader = control.leader()
        ttl = leader.ttl_ms if leader else lock_ttl
        # Followers refresh their entry about once per lease: three leases
        # keep a live follower listed and drop the ones that stopped (the
        # same window as ``dramatiq-cron status``).
        candidates = control.candidates(since_ms=now - 3 * ttl)
        paused = len(control.paused())
        policy = control.maxmemory_policy()
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
    if len(fingerprints) > 1:
        warnings.append(
            f"Candidates declare different schedule sets ({len(fingerprints)} fingerprints): "
            "a deploy is under way, or some workers run other code."
        )
    if len(versions) > 1:
        warnings.append(f"Candidates run different versions: {', '.join(sorted(map(str, versions)))}.")
    if policy is not None and policy.startswith("allkeys-"):
        warnings.append(
            f"maxmemory-policy is {policy}: Redis can evict the ledger, and evicted ticks may fire again. "
            "Use noeviction (or a volatile-* policy)."
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
    paused_by: str | None
    last: LastDecision | None
    next_ms: list[int]
    now_ms: int


def history_view(
    control: Control, schedule_id: str, schedule: BoundSchedule | None, source: str | None, *, before: str | None
) -> HistoryView:
    """A schedule's history page: entries older than ``before``, newest
    first, and the chart of the same entries."""
    now = control.server_ms()
    page = control.schedule_history(schedule_id, limit=HISTORY_PAGE, before=before)
    paused = control.paused()
    paused_by = None
    if schedule is not None:
        paused_by = (
            schedule.id if schedule.id in paused else schedule.actor_name if schedule.actor_name in paused else None
        )
    upcoming: list[int] = []
    if schedule is not None:
        tick = now
        for _ in range(NEXT_RUNS):
            tick = schedule.next_after(tick)
            upcoming.append(tick)
    return HistoryView(
        schedule_id=schedule_id,
        schedule=schedule,
        source=source,
        rows=[HistoryRow(entry=e, lag_ms=lag_ms(e)) for e in page.entries],
        page=page,
        chart=lag_chart(page.entries),
        paused_by=paused_by,
        last=control.decisions([schedule_id]).get(schedule_id),
        next_ms=upcoming,
        now_ms=now,
    )
