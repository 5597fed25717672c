"""One meaning per cron expression, whatever supported croniter is installed.

A table of expressions that croniter 6.2 and 7.0 read differently (or that
are easy to get wrong): each one is either refused at declaration, naming
the actor and the value, or rewritten to a canonical form whose next runs
are pinned against cronsim, an independent evaluator of standard cron.
CI runs this file on the oldest and the newest croniter that
pyproject.toml allows (.ci/run), so the same table holds on both.
"""

from __future__ import annotations

import binascii
import datetime as dt
from importlib import metadata

import pytest
from croniter import croniter
from cronsim import CronSim

from dramatiq_cron_middleware import CronScheduleError, Schedule
from dramatiq_cron_middleware.schedules.expression import SEMANTICS
from dramatiq_cron_middleware.schedules.schedule import BoundSchedule, schedules_for_actor

UTC = dt.timezone.utc
START = dt.datetime(2026, 1, 1, tzinfo=UTC)
RUNS = 6

# (as written, canonical form, the same schedule in cronsim's syntax or None
# when it is the canonical form).  cronsim spells "last Friday" 5L.
ACCEPTED = [
    # The field's last value with a step is that value alone (croniter 6:
    # the whole field stepped, ':00/:15/:30/:45').
    ("59/15 * * * *", "59 * * * *", None),
    ("0 23/2 * * *", "0 23 * * *", None),
    ("* 23/1 * * *", "* 23 * * *", None),
    ("0 0 31/2 * *", "0 0 31 * *", None),
    ("0 0 1 12/2 *", "0 0 1 12 *", None),
    ("0 0 1 DEC/3 *", "0 0 1 12 *", None),
    ("59/20 * * * * *", "59 * * * * *", "59 * * * * *"),
    # A start below the last value keeps its step.
    ("50/5 * * * *", "50/5 * * * *", "50-59/5 * * * *"),
    ("0 0 29/3 2 *", "0 0 29/3 2 *", "0 0 29 2 *"),
    # One-value ranges are the value (croniter 7: the whole field).
    ("5-5 * * * *", "5 * * * *", None),
    ("59-59/15 * * * *", "59 * * * *", None),
    ("0 0 * * SUN-SUN", "0 0 * * SUN", None),
    ("0 0 1 JAN-JAN/2 *", "0 0 1 JAN *", None),
    # Both day fields restricted: a day matching either fires.
    ("0 0 1-7 * 1", "0 0 1-7 * 1", None),
    ("0 0 13 * 5", "0 0 13 * 5", None),
    ("0 0 1 * 0-7", "0 0 1 * 0-7", None),
    ("0 0 31 2,3 0", "0 0 31 2,3 0", None),
    ("0 0 * * 5-7/2", "0 0 * * 5-7/2", None),
    ("0 0 * * 0-7/2", "0 0 * * 0-7/2", None),
    # The n-th and the last weekday, the last day, a leap day.
    ("0 0 * * 1#5", "0 0 * * 1#5", None),
    ("0 12 * * 5#1", "0 12 * * 5#1", None),
    ("0 0 * * L5", "0 0 * * L5", "0 0 * * 5L"),
    ("0 0 L * *", "0 0 L * *", None),
    ("30 2 29 2 *", "30 2 29 2 *", None),
    ("@weekly", "0 0 * * 0", None),
    # Sunday as 7 with seconds (croniter 6 refuses 7 in a 6-field expression).
    ("0 0 0 * * 7", "0 0 0 * * 0", None),
    ("0 0 0 * * 5-7", "0 0 0 * * 0,5,6", None),
    ("0 0 0 * * 0-7/2", "0 0 0 * * 0,2,4,6", None),
    ("0 0 0 * * 7#2", "0 0 0 * * 0#2", None),
    ("0 0 0 * * L7", "0 0 0 * * L0", "0 0 0 * * 0L"),
    # Wrapping ranges.
    ("0 22-2 * * *", "0 22-2 * * *", "0 0-2,22-23 * * *"),
    ("0 0 * * SAT-MON", "0 0 * * SAT-MON", "0 0 * * 0,1,6"),
    # Tabs and repeated spaces separate fields.
    ("0\t0  *  *  *", "0 0 * * *", None),
]

# (as written, what the error says).  Every message also names the actor
# and the expression.
REFUSED = [
    ("0 0 31 2 0", "day-of-month '31' never falls in month '2'"),
    ("0 0 30 2 1", "write '0 0 * 2 1'"),
    ("0 0 30,31 2 0", "never falls in month '2'"),
    ("0 0 31 2,4 1-5", "never falls in month '2,4'"),
    ("0 0 * * 5/2", "day-of-week 'N/step'"),
    ("0 0 * * 6/2", "day-of-week 'N/step'"),
    ("0 0 * * 7/2", "day-of-week 'N/step'"),
    ("0 0 * * SAT/2", "day-of-week 'N/step'"),
    ("H(50-70) * * * *", "'H(50-70)' reaches beyond the minute field (0-59)"),
    ("0 H(0-30) * * *", "reaches beyond the hour field"),
    ("0 0 * * 1#0", "'1#0'"),
    ("0 0 * * 1#7", "'1#7'"),
    ("0 0 0 * *", "day-of-month 0 does not exist"),
    ("0 0 0 0 * *", "day-of-month 0 does not exist"),
    ("0 0 0-5 * *", "day-of-month 0 does not exist"),
    ("0 0 1 0 *", "month 0 does not exist"),
    ("\u0663 * * * *", "U+0663"),
    ("0\u00a00 * * *", "U+00A0"),
    ("0\u30000 * * *", "U+3000"),
    ("0\x1c0 * * *", "got 4"),
    ("0 0 31 4,6 *", "never fires"),
    ("0 0 0 * * 7-1", "write Sunday as 0"),
]


def bind(expression: str | Schedule, *, actor: str = "report") -> BoundSchedule:
    return schedules_for_actor(actor, "default", expression, timezone="UTC", catch_up="each", catch_up_window=0)[0]


def next_runs(schedule: BoundSchedule) -> list[dt.datetime]:
    out, tick = [], int(START.timestamp() * 1000)
    for _ in range(RUNS):
        tick = schedule.next_after(tick)
        out.append(dt.datetime.fromtimestamp(tick / 1000, tz=UTC))
    return out


def cronsim_runs(expression: str) -> list[dt.datetime]:
    it = CronSim(expression, START)
    return [next(it) for _ in range(RUNS)]


def test_the_installed_croniter_is_one_the_package_supports() -> None:
    """The table below is what the supported range promises; CI runs it on
    both ends of the range."""
    major = int(metadata.version("croniter").split(".")[0])
    assert 6 <= major <= 7, metadata.version("croniter")
    assert SEMANTICS == f"cron rules 1, croniter {major}"


@pytest.mark.parametrize(("written", "canonical", "theirs"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_an_expression_has_its_canonical_form_and_standard_cron_next_runs(
    written: str, canonical: str, theirs: str | None
) -> None:
    schedule = bind(written)
    assert schedule.expression == canonical
    assert next_runs(schedule) == cronsim_runs(theirs or canonical)


@pytest.mark.parametrize(("written", "said"), REFUSED, ids=[r[0].encode("unicode_escape").decode() for r in REFUSED])
def test_a_form_croniter_versions_read_apart_is_refused_naming_actor_and_value(written: str, said: str) -> None:
    with pytest.raises(CronScheduleError) as caught:
        bind(written, actor="nightly_report")
    message = str(caught.value)
    assert message.startswith(f"actor 'nightly_report', cron {written!r}: "), message
    assert said in message, message


@pytest.mark.parametrize(
    ("written", "alone"),
    [
        ("H/60 * * * *", "H * * * *"),
        ("H/100 * * * *", "H * * * *"),
        ("H(0-29)/40 * * * *", "H(0-29) * * * *"),
        ("H(0-29)/30 * * * *", "H(0-29) * * * *"),
        ("H(30-59)/30 * * * *", "H(30-59) * * * *"),
        ("0 H/24 * * *", "0 H * * *"),
        ("0 0 H/31 * *", "0 0 H * *"),
        ("0 0 * * H/7", "0 0 * * H"),
    ],
)
def test_a_hashed_step_as_wide_as_its_range_is_the_hashed_value_alone(written: str, alone: str) -> None:
    """croniter 6 drew such a value from 0..step-1 (outside the range, or
    the whole field stepped when it drew the last value); croniter 7 draws
    it from the range: one value per period, the same as ``H`` alone."""
    for actor in ("report_a", "report_b", "report_c"):
        schedule = bind(Schedule(written, name="hashed"), actor=actor)
        assert schedule.expression == alone
        assert next_runs(schedule) == next_runs(bind(Schedule(alone, name="hashed"), actor=actor))


@pytest.mark.parametrize(
    ("written", "step"),
    [
        ("H/15 * * * *", dt.timedelta(minutes=15)),
        ("H(0-29)/10 * * * *", dt.timedelta(minutes=10)),
        ("0 H/12 * * *", dt.timedelta(hours=12)),
        ("H(10-40)/7 H * * *", dt.timedelta(minutes=7)),
    ],
)
def test_a_hashed_step_narrower_than_its_range_keeps_its_step(written: str, step: dt.timedelta) -> None:
    schedule = bind(Schedule(written, name="hashed"))
    assert schedule.expression == written
    first, second = next_runs(schedule)[:2]
    assert second - first == step


def h_day(actor: str, name: str) -> int:
    """The day of month ``H`` picks for ``actor/name`` (croniter's CRC32)."""
    return ((binascii.crc32(f"{actor}/{name}".encode()) & 0xFFFFFFFF) >> 2) % 31 + 1


@pytest.mark.parametrize(("expression", "said"), [("0 0 H 2 *", "never fires"), ("0 0 H 2 0", "never falls")])
def test_an_h_day_that_never_comes_is_refused_for_the_names_that_pick_it(expression: str, said: str) -> None:
    """``H`` picks a day from 1 to 31 by the schedule's identity: in
    February, the 30th and 31st never come (croniter 6 then fails on
    every walk, croniter 7 fires on the day of week alone)."""
    names = [f"tenant-{n}" for n in range(200)]
    bad = next(n for n in names if h_day("report", n) >= 30)
    good = next(n for n in names if h_day("report", n) <= 28)
    with pytest.raises(CronScheduleError) as caught:
        bind(Schedule(expression, name=bad))
    assert "actor 'report'" in str(caught.value) and said in str(caught.value), caught.value
    assert next_runs(bind(Schedule(expression, name=good)))[0].month == 2
    with pytest.raises(CronScheduleError, match=said):  # after a name whose H value fires, too
        bind(Schedule(expression, name=bad))


def test_h_schedules_share_walks_only_with_the_ids_that_pick_the_same_values() -> None:
    """Walks are shared by the values H picks, not by the expression: each
    id still gets its own ticks, as croniter gives them for that id."""
    start = int(dt.datetime(2026, 3, 1, 12, 0, 30, tzinfo=dt.timezone.utc).timestamp() * 1000)
    schedules = [bind(Schedule("H H * * *", name=f"tenant-{n}")) for n in range(300)]
    assert len({s.next_after(start) for s in schedules}) > 100  # picked apart, not one shared walk
    for s in schedules:  # asked after the others: a wrongly shared walk would answer for another id
        oracle = croniter("H H * * *", start / 1000, hash_id=f"report/{s.name}".encode()).get_next(float)
        assert s.next_after(start) == oracle * 1000 and s.next_after(start + 86_400_000) == oracle * 1000 + 86_400_000
