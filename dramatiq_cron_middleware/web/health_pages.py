"""Run monitoring on the dashboard: every schedule's health (the overview's
counts, the schedules that need attention, the health filter, ``/health``)
and one schedule's runs.

The health of every schedule is read as ``dramatiq-cron check`` reads it
(``monitoring.read.read_health``, the one read: the leader's stored decision, and
``missed`` worked out from the ledger, so it holds without a leader): one
pipeline per thousand schedules, the runtime ones as the schedules pages
know them (:class:`~.pages.RuntimeIndex`, listed again only when they
changed).  That read grows with the number of schedules (seconds for 100,000
runtime ones), so it is read again in the background once the last read
is older than ten times its duration, at least two seconds, and waited
for when it is older than a minute (:class:`ReportCache`).  A page of schedules reads only its own rows'
health, fresh.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..monitoring.records import RunRecord, ScheduleHealth
from ..schedules.schedule import BoundSchedule
from ..service import Cron
from ..status import Health
from ..targets import paused_by
from .pages import Filters, RuntimeIndex, SchedulesView, matches, natural_key, paged, rows_of

__all__ = ["ReportCache", "Runs", "filtered_view", "health_of", "read_all", "schedule_runs"]

#: Runs shown on a schedule's page.
RUNS_SHOWN = 50
# How long a report of every schedule's health is used: at least this many
# seconds, and this many times as long as reading it took.
_FRESH_S = 2.0
_FRESH_FACTOR = 10

if TYPE_CHECKING:
    from ..monitoring.health import Policy

PolicyOf = Callable[[BoundSchedule], "Policy"]


def read_all(cron: Cron, code: Sequence[BoundSchedule], runtime: RuntimeIndex, *, policy: PolicyOf) -> Health:
    """Every schedule's health, declared and runtime, in the schedules
    page's order (declared ones as declared, then runtime ones in natural
    order of their ids), and the stored definitions read differently now
    or not at all, as ``dramatiq-cron check`` reports them.

    Raises:
      redis.ConnectionError, redis.TimeoutError: Redis did not answer.
    """
    now = cron.server_ms()
    stored = sorted(runtime.schedules(), key=lambda s: natural_key(s.id))
    health = cron.health([*code, *stored], now_ms=now, policy=policy)
    return dataclasses.replace(health, report=dataclasses.replace(health.report, stored=runtime.problems()))


class ReportCache:
    """Every schedule's health, read once, then again in the background
    whenever the last read is older than ten times its own duration (at
    least two seconds): pages never wait for it after the first, and the
    dashboard spends at most about a tenth of its time on it, whatever the
    number of schedules.  Only the first call waits for a read (and raises
    its error), and any call that finds the report older than ``max_age_ms``
    (no page asked for a while, or background reads failed): a page never
    shows health older than that.  A failed background read keeps the last
    report.

    Parameters:
      read: Reads the report (:func:`read_all`).
      monotonic: The clock.  Defaults to ``time.monotonic``.
      background: Runs a refresh; defaults to a new daemon thread.
      max_age_ms(int): The oldest report served, in milliseconds.  Defaults
        to 60000 (a minute).
    """

    def __init__(
        self,
        read: Callable[[], Health],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        background: Callable[[Callable[[], None]], None] | None = None,
        max_age_ms: int = 60_000,
    ) -> None:
        self._read = read
        self._max_age_s = max_age_ms / 1000
        # When the report served was read (the clock's reading).
        self._read_at = 0.0
        self._monotonic = monotonic
        self._background = background or _thread
        self._lock = threading.Lock()
        self._report: Health | None = None
        self._until = 0.0
        self._refreshing = False

    def get(self) -> Health:
        """The report, read now (the first time) or recently.

        Raises:
          redis.ConnectionError, redis.TimeoutError: Redis did not answer
            the first read, or the read of a report too old to serve.
        """
        with self._lock:
            if self._report is None or self._monotonic() - self._read_at > self._max_age_s:
                self._refresh()
            assert self._report is not None
            if self._monotonic() >= self._until and not self._refreshing:
                self._refreshing = True
                self._background(self._refresh_quietly)
            return self._report

    def _refresh(self) -> None:
        started = self._monotonic()
        report = self._read()
        finished = self._monotonic()
        self._report, self._read_at = report, finished
        self._until = finished + max(_FRESH_S, _FRESH_FACTOR * (finished - started))

    def _refresh_quietly(self) -> None:
        try:
            started = self._monotonic()
            report = self._read()
            finished = self._monotonic()
        except Exception:  # the pages show an unreachable Redis themselves
            finished, report = self._monotonic(), None
        with self._lock:
            if report is not None:
                self._report, self._read_at = report, finished
            self._until = finished + max(_FRESH_S, _FRESH_FACTOR * (finished - started))
            self._refreshing = False


def _thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="cron-dashboard-health", daemon=True).start()


def health_of(cron: Cron, schedules: Sequence[BoundSchedule], *, policy: PolicyOf) -> dict[str, ScheduleHealth]:
    """The health of a page's schedules, by id."""
    if not schedules:
        return {}
    report = cron.health(schedules, now_ms=cron.server_ms(), policy=policy).report
    return {s.schedule_id: s for s in report.schedules}


def filtered_view(cron: Cron, report: Health, filters: Filters) -> SchedulesView:
    """The schedules page with a health filter: the schedules in that
    health (``problems``: the worst first), also filtered by search, source
    and paused state, one page of them (a page past the last shows the
    last)."""
    paused = cron.pauses()
    needle = filters.query.lower()
    matching = [
        report.schedules[h.schedule_id] for h in report.matching(filters.health) if h.schedule_id in report.schedules
    ]
    picked = [
        s
        for s in matching
        if (not needle or matches(s, needle))
        and filters.source in ("all", s.source)
        and (filters.state == "all" or (paused_by(s, paused) is not None) == (filters.state == "paused"))
    ]
    filters, pages, first = paged(filters, len(picked))
    now = report.report.now_ms
    return SchedulesView(
        rows=rows_of(cron, picked[first : first + filters.per_page], now_ms=now, pauses=paused),
        total=len(picked),
        filters=filters,
        pages=pages,
        now_ms=now,
    )


@dataclasses.dataclass(frozen=True)
class Runs:
    """A schedule's newest runs and its health, for its page."""

    runs: list[RunRecord]
    health: ScheduleHealth | None


def schedule_runs(cron: Cron, schedule_id: str, schedule: BoundSchedule | None, *, policy: PolicyOf) -> Runs:
    """The newest runs of ``schedule_id`` (also of a schedule no longer
    declared) and, for a known schedule, its health."""
    runs = cron.runs(schedule_id, limit=RUNS_SHOWN)
    health = None if schedule is None else health_of(cron, [schedule], policy=policy).get(schedule_id)
    return Runs(runs=runs, health=health)
