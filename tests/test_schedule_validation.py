"""Every bad schedule fails at declaration, naming the actor and the value.

No Redis is needed to declare actors: the middleware points at a closed
port and is never booted.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import MiddlewareError

from dramatiq_cron_middleware import CronMiddleware, CronScheduleError, Schedule
from dramatiq_cron_middleware.schedules.planner import message_for


def declare(cron: Any, *, name: str = "nightly_report", **middleware: Any) -> CronMiddleware:
    """Declare an actor with ``cron`` on a fresh broker; return the middleware."""
    broker = StubBroker()
    cron_middleware = CronMiddleware(redis="redis://127.0.0.1:1", **middleware)
    broker.add_middleware(cron_middleware)

    def job(*args: Any, **kwargs: Any) -> None:
        pass

    dramatiq.actor(job, actor_name=name, broker=broker, cron=cron)
    return cron_middleware


BAD = [
    ("not a cron", "not a cron", "not a cron"),
    ("minute 61", "61 * * * *", "61"),
    ("weekday 8", "* * * * 8", "8"),
    ("empty", "", "empty"),
    ("blank", "   ", "empty"),
    ("three fields", "* * *", "got 3"),
    ("seven fields", "* * * * * * *", "got 7"),
    ("second 60", "60 * * * * *", "60"),
    ("hour 24", "0 24 * * *", "24"),
    ("month 13", "0 0 1 13 *", "13"),
    ("day 0", "0 0 0 * *", "0 0 0"),
    ("never matches", "0 0 31 2 *", "31 2"),
    ("unknown alias", "@reboot", "@reboot"),
    ("random R", "R * * * *", "R"),
    ("bad step", "*/0 * * * *", "*/0"),
    ("punctuation", "0 0 * * mon;rm", "mon;rm"),
    ("non-string", 5, "5"),
    ("None in a list", [None], "None"),
    ("bytes", b"* * * * *", "b'"),
    ("empty list", [], "[]"),
    ("a dict", {"expression": "* * * * *"}, "expression"),
]


@pytest.mark.parametrize(("cron", "value"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_expression_fails_at_declaration_naming_actor_and_value(cron: Any, value: str) -> None:
    with pytest.raises(CronScheduleError) as info:
        declare(cron)
    assert isinstance(info.value, MiddlewareError)
    message = str(info.value)
    assert "'nightly_report'" in message
    assert value in message, message


BAD_OPTIONS: list[tuple[str, dict[str, Any], str]] = [
    # A well-formed zone this machine lacks is refused where the Schedule
    # is bound, naming the actor: tests/test_zone_names_actor.py.
    ("zone not a string", {"timezone": 3}, "3"),
    ("path-like zone", {"timezone": "../etc/passwd"}, "../etc/passwd"),
    ("args not JSON", {"args": (object(),)}, "args"),
    ("args a string", {"args": "abc"}, "'abc'"),
    ("kwargs not JSON", {"kwargs": {"when": dt.date(2026, 1, 1)}}, "kwargs"),
    ("kwargs NaN", {"kwargs": {"x": float("nan")}}, "nan"),
    ("kwargs int key", {"kwargs": {1: "a"}}, "[1]"),
    ("catch_up", {"catch_up": "sometimes"}, "'sometimes'"),
    ("negative window", {"catch_up_window": -1}, "-1"),
    ("negative jitter", {"jitter": -5}, "-5"),
    ("float jitter", {"jitter": 1.5}, "1.5"),
    ("bool jitter", {"jitter": True}, "True"),
    ("zero max_age", {"max_age": 0}, "max_age"),
    ("overlap", {"overlap": "queue"}, "'queue'"),
    ("overlap_ttl", {"overlap": "skip", "overlap_ttl": 0}, "overlap_ttl"),
    ("options not a dict", {"options": ["x"]}, "['x']"),
    ("reserved option", {"options": {"cron_tick": "x"}}, "cron_tick"),
    ("max_age in options", {"options": {"max_age": 5}}, "max_age"),
    ("overlap_ttl in options", {"options": {"overlap_ttl": 5}}, "overlap_ttl"),
]


@pytest.mark.parametrize(("options", "value"), [(b[1], b[2]) for b in BAD_OPTIONS], ids=[b[0] for b in BAD_OPTIONS])
def test_a_bad_schedule_option_fails_when_the_schedule_is_built_naming_the_value(
    options: dict[str, Any], value: str
) -> None:
    """A Schedule checks itself without an actor (a form can check one):
    the error names the Schedule and the value."""
    with pytest.raises(CronScheduleError) as info:
        Schedule("0 * * * *", **options)
    message = str(info.value)
    assert message.startswith("Schedule, cron '0 * * * *': "), message
    assert value in message, message


@pytest.mark.parametrize(
    ("expression", "value"),
    [(b[1], b[2]) for b in BAD if isinstance(b[1], str)],
    ids=[b[0] for b in BAD if isinstance(b[1], str)],
)
def test_a_schedule_with_a_bad_expression_cannot_be_built(expression: str, value: str) -> None:
    with pytest.raises(CronScheduleError) as info:
        Schedule(expression)
    assert value in str(info.value) and str(info.value).startswith("Schedule"), str(info.value)


def test_an_expression_that_never_fires_says_so() -> None:
    with pytest.raises(CronScheduleError, match=re.escape("cron '0 0 31 2 *': this expression never fires")):
        Schedule("0 0 31 2 *")
    with pytest.raises(
        CronScheduleError, match=re.escape("actor 'nightly_report', cron '0 0 30 2 *': this expression never fires")
    ):
        declare("0 0 30 2 *")


@pytest.mark.parametrize(
    ("name", "value"), [("  ", "name must be 1 to 64"), ("eu/daily", "'eu/daily'"), ("eu:daily", "'eu:daily'")]
)
def test_a_bad_name_fails_when_the_schedule_is_built_naming_the_value(name: str, value: str) -> None:
    """A Schedule checks its name when built (issue 28 item 9), as a string
    in ``cron=`` is checked when declared, naming the actor."""
    with pytest.raises(CronScheduleError) as info:
        Schedule("0 * * * *", name=name)
    assert str(info.value).startswith("Schedule, cron '0 * * * *': ") and value in str(info.value), str(info.value)


BAD_SETS = [
    (
        "two unnamed schedules",
        [Schedule("0 * * * *", args=(1,)), Schedule("30 * * * *", args=(2,))],
        "2 schedules without name=",
    ),
    (
        "duplicate name",
        [Schedule("0 * * * *", name="a"), Schedule("30 * * * *", name="a")],
        "nightly_report/a",
    ),
    ("duplicate name", [Schedule("0 * * * *", name="a"), Schedule("5 * * * *", name="a")], "nightly_report/a"),
]


@pytest.mark.parametrize(("cron", "value"), [(b[1], b[2]) for b in BAD_SETS], ids=[b[0] for b in BAD_SETS])
def test_a_bad_name_or_set_of_schedules_fails_at_declaration_naming_actor_and_value(cron: Any, value: str) -> None:
    with pytest.raises(CronScheduleError) as info:
        declare(cron)
    message = str(info.value)
    assert "'nightly_report'" in message
    assert value in message, message


def test_an_unknown_default_zone_fails_when_the_middleware_is_built() -> None:
    with pytest.raises(CronScheduleError, match=re.escape("'Europe/Atlantis'")):
        CronMiddleware(redis="redis://127.0.0.1:1", timezone="Europe/Atlantis")


GOOD = [
    "*/10 * * * * *",
    "0 */5 9-17 * * mon-fri",
    "@hourly",
    "@DAILY",
    "  0   0 *  * *  ",
    "0 0 L * *",
    "0 0 15W * *",
    "0 0 * * L5",
    "0 0 * * 1#2",
    "0 0 1,15 jan,jul *",
    "H H * * *",
    "H(0-29)/10 * * * *",
    "0 12 ? * 3",
]


@pytest.mark.parametrize("cron", GOOD)
def test_valid_expressions_are_accepted(cron: str) -> None:
    middleware = declare(cron)
    (schedule,) = middleware.all_schedules()
    assert schedule.next_after(0) > 0


def test_a_sunday_job_fires_on_sunday_whether_written_0_7_or_sun() -> None:
    """Day-of-week 0 and 7 both mean Sunday (a peer never fired 7)."""
    friday = int(dt.datetime(2026, 1, 2, 12, tzinfo=dt.timezone.utc).timestamp() * 1000)
    for dow in ("0", "7", "sun", "SUN", "6-7"):
        (schedule,) = declare(f"0 9 * * {dow}").all_schedules()
        tick = dt.datetime.fromtimestamp(schedule.next_after(friday) / 1000, tz=dt.timezone.utc)
        expected = 3 if dow == "6-7" else 4  # Saturday 3rd for 6-7, else Sunday 4th
        assert tick == dt.datetime(2026, 1, expected, 9, tzinfo=dt.timezone.utc), dow
        if dow == "6-7":
            after = dt.datetime.fromtimestamp(schedule.next_after(schedule.next_after(friday)) / 1000, dt.timezone.utc)
            assert after.isoweekday() == 7


def test_hashed_fields_are_stable_per_actor_and_spread_across_actors() -> None:
    """``H`` picks the same minute for an actor in every process and
    restart (CRC32 of actor and schedule name, not Python's hash()), and
    different actors get different minutes."""
    first = declare("H H * * *", name="report_a").all_schedules()[0].next_after(0)
    again = declare("H H * * *", name="report_a").all_schedules()[0].next_after(0)
    assert first == again
    # Pinned: a change of the hash would move every user's H schedules.
    assert dt.datetime.fromtimestamp(first / 1000, dt.timezone.utc).strftime("%H:%M") == _expected_h("report_a")
    minutes = {declare("H * * * *", name=f"report_{i}").all_schedules()[0].next_after(0) for i in range(20)}
    assert len(minutes) >= 10


def _expected_h(actor: str) -> str:
    """croniter's documented hashing: CRC32 of the hash id, shifted per field."""
    import binascii

    crc = binascii.crc32(f"{actor}/H H * * *".encode()) & 0xFFFFFFFF
    return f"{(crc >> 1) % 24:02d}:{(crc >> 0) % 60:02d}"


def test_several_schedules_on_one_actor_have_distinct_identities_and_args() -> None:
    middleware = declare(
        [
            "0 * * * *",
            Schedule("30 1 * * *", timezone="Europe/Berlin", kwargs={"full": True}, name="nightly-berlin"),
            Schedule("30 1 * * *", timezone="America/New_York", kwargs={"full": False}, name="nightly-ny"),
        ]
    )
    ids = [s.id for s in middleware.all_schedules()]
    assert ids == ["nightly_report", "nightly_report/nightly-berlin", "nightly_report/nightly-ny"]
    messages = [message_for(s, 0, prefix="p") for s in middleware.all_schedules()]
    assert [m.kwargs for m in messages] == [{}, {"full": True}, {"full": False}]
    assert len({m.message_id for m in messages}) == 3


def test_a_name_keeps_the_identity_across_an_expression_change() -> None:
    before = declare(Schedule("0 3 * * *", name="cleanup")).all_schedules()[0]
    after = declare(Schedule("15 4 * * *", name="cleanup")).all_schedules()[0]
    assert before.id == after.id == "nightly_report/cleanup"
    assert before.shape != after.shape
    # An actor's one unnamed schedule keeps its identity across an expression
    # or zone change as well: the actor's name.
    unnamed = declare("15 4 * * *").all_schedules()[0]
    moved = declare(Schedule("0 5 * * *", timezone="Europe/Berlin")).all_schedules()[0]
    assert unnamed.id == moved.id == "nightly_report"


def test_overlap_ttl_defaults_to_time_limit_plus_queueing_allowance() -> None:
    (schedule,) = declare(Schedule("* * * * * *", overlap="skip", max_age=5_000, jitter=200)).all_schedules()
    assert schedule.overlap_ttl == 600_000 + 5_000 + 200
    (explicit,) = declare(Schedule("* * * * * *", overlap="skip", overlap_ttl=3_000)).all_schedules()
    assert explicit.overlap_ttl == 3_000
    assert "overlap_ttl" not in explicit.options


def test_unnamed_schedules_are_refused_with_the_fix_spelled_out() -> None:
    """Given the README's old example, several plain expressions, the error
    names the actor and every unnamed expression, and shows how to name
    them (names, not expressions, identify schedules)."""
    with pytest.raises(CronScheduleError) as info:
        declare(["*/15 * * * *", "0 12 * * 1", Schedule(every=90_000)], name="sync")
    message = str(info.value)
    assert message.startswith("actor 'sync': 3 schedules without name="), message
    for shown in ('Schedule("*/15 * * * *", name="...")', 'Schedule("0 12 * * 1", name="...")'):
        assert shown in message, message
    assert 'Schedule(every=90000, name="...")' in message, message
    assert "all but one" in message, message


def test_one_unnamed_schedule_beside_named_ones_is_accepted() -> None:
    schedules = declare(["*/15 * * * *", Schedule("0 12 * * 1", name="monday-noon")], name="sync").all_schedules()
    assert [s.id for s in schedules] == ["sync", "sync/monday-noon"]


def test_a_schedule_whose_next_tick_lies_past_year_9999_has_none() -> None:
    """Found by the round-trip property test: Feb 29 after the last leap
    day before year 10000 has no next tick; croniter raised ValueError."""
    from dramatiq_cron_middleware.schedules.schedule import NEVER, bind_schedule

    start = int(dt.datetime(9996, 3, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
    bound = bind_schedule(
        "job", "default", Schedule("15 2 29 2 *", start=start), timezone="UTC", catch_up="each", catch_up_window=300_000
    )
    assert bound.next_after(start) == NEVER
