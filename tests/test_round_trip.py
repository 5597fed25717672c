"""Every way a stored runtime schedule comes back to be saved again leaves
it as it was: the dashboard's Edit form saved unchanged, and the JSON that
``dramatiq-cron add --json`` prints given back as ``add``'s flags.

Generated schedules (every option, one-shots and intervals among them) are
added through the Python API to the simulator's in-memory store; the
strategies depend only on what they draw (no clock: the simulator's fake
time is fixed, and a one-shot's instant is drawn after it)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dramatiq_cron_middleware import CronMiddleware, Schedule
from dramatiq_cron_middleware.ops import cli
from dramatiq_cron_middleware.schedules.ids import ScheduleId, format_id, parse_id
from dramatiq_cron_middleware.schedules.schedule import MAX_DESCRIPTION, NEVER, BoundSchedule
from dramatiq_cron_middleware.testing import CronSimulator
from dramatiq_cron_middleware.web import forms
from tests.support.examples import examples

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
ACTOR = "report"

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_MS = st.integers(0, 10**9)
_EXPRESSIONS = st.sampled_from(
    ["0 9 * * *", "*/5 * * * *", "30 1 * * 1-5", "*/10 * * * * *", "0 0 1 * *", "H H * * *", "15 2 29 2 *"]
)
_ZONES = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Pacific/Kiritimati"])
_DESCRIPTIONS = st.text(st.characters(exclude_categories=("Cs", "Cc")) | st.sampled_from(" \n\t"), max_size=40) | (
    st.text(
        st.characters(codec="ascii", exclude_categories=("Cc",)), min_size=MAX_DESCRIPTION, max_size=MAX_DESCRIPTION
    )
)


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    """Any valid runtime schedule: a cron expression, an interval or a
    one-shot, with any of the other options set or left to the defaults."""
    kind = draw(st.sampled_from(["cron", "every", "at"]))
    timing: dict[str, Any] = {}
    if kind == "at":
        timing["at"] = draw(st.integers(NOW_MS + 1000, NEVER - 2))
    else:
        if kind == "cron":
            timing["expression"] = draw(_EXPRESSIONS)
        else:
            every = draw(st.integers(1000, 10**8))
            timing.update(every=every, offset=draw(st.integers(0, every - 1)))
        start = draw(st.none() | st.integers(0, NEVER - 2))
        end = draw(st.none() | st.integers(0 if start is None else start + 1, NEVER - 1))
        timing.update(start=start, end=end)
    options = draw(st.none() | st.dictionaries(st.sampled_from(["max_retries", "priority"]), st.integers(0, 9)))
    optional = {
        "timezone": draw(st.none() | _ZONES),
        "args": tuple(draw(st.lists(_JSON, max_size=3))),
        "kwargs": draw(st.dictionaries(st.text(max_size=6), _JSON, max_size=3)),
        "catch_up": draw(st.none() | st.sampled_from(["each", "latest", "none"])),
        "catch_up_window": draw(st.none() | _MS),
        "jitter": draw(_MS),
        "max_age": draw(st.none() | st.integers(1, 10**9)),
        "overlap": draw(st.sampled_from(["allow", "skip"])),
        "overlap_ttl": draw(st.none() | st.integers(1, 10**9)),
        "options": options or {},
        "description": draw(st.none() | _DESCRIPTIONS),
        "grace": draw(st.none() | _MS),
        "max_runtime": draw(st.none() | st.integers(1, 10**9)),
        "failure_threshold": draw(st.none() | st.integers(1, 100)),
    }
    return Schedule(**timing, **optional)


_NAMES = st.from_regex(r"\A[A-Za-z0-9_.-]{1,64}\Z")


@pytest.fixture(scope="module")
def cron() -> Iterator[CronMiddleware]:
    broker = StubBroker()
    middleware = CronMiddleware()
    broker.add_middleware(middleware)
    dramatiq.actor(lambda *args, **kwargs: None, actor_name=ACTOR, broker=broker)
    simulator = CronSimulator(broker, now=NOW)
    try:
        yield middleware
    finally:
        simulator.close()
        broker.close()


def _definition(schedule: BoundSchedule) -> BoundSchedule:
    """The schedule as stored, less its revision (a save writes a new one)."""
    return dataclasses.replace(schedule, revision=0)


_SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(schedule=schedules(), name=_NAMES)
def test_the_edit_form_saved_unchanged_leaves_every_schedule_as_stored(
    cron: CronMiddleware, schedule: Schedule, name: str
) -> None:
    """Given any schedule added through the API, When its Edit form (every
    field as the dashboard fills it in) is posted back unchanged, Then the
    stored schedule is the same: no description erased, no one-shot turned
    into an interval, no option reset."""
    before = cron.add(ACTOR, schedule, name=name)
    form = forms.RuntimeForm.of(before.schedule)
    posted = {f.name: str(getattr(form, f.name)) for f in dataclasses.fields(form) if f.name != "errors"}
    form = forms.RuntimeForm.parse(posted)
    saved = forms.save(cron.service, form, original=before.schedule.id, actors=[ACTOR], who="test")
    assert isinstance(saved, forms.Saved), saved
    after = cron.runtime.get(ACTOR, name)
    assert after is not None
    assert _definition(after.schedule) == _definition(before.schedule)


@_SETTINGS
@given(schedule=schedules(), name=_NAMES)
# Python 3.11's argparse read ``--name=--`` as ``[]``.
@example(schedule=Schedule(at=1_893_456_001_000), name="--")
def test_the_json_of_add_given_back_as_its_flags_stores_the_same_schedule(
    cron: CronMiddleware, schedule: Schedule, name: str
) -> None:
    """Given any schedule added through the API, When the record ``add
    --json`` prints of it is given back to ``add`` as its flags (an
    operator copying a schedule), Then the schedule stored is the same."""
    before = cron.add(ACTOR, schedule, name=name)
    record = cli.runtime_record(before)
    args = cli.parser().parse_args(["add", "app", *_flags(record)])
    again = cron.add(ACTOR, cli.schedule_of(args), name=args.name)
    assert _definition(again.schedule) == _definition(before.schedule)


def _flags(record: dict[str, Any]) -> list[str]:
    """``add``'s arguments for a record of ``add --json``."""
    out = [record["actor"]]
    if record["at"] is not None:
        out.append(f"--at={record['at']}")
    elif record["every"] is not None:
        out += [f"--every={record['every']}", f"--offset={record['offset']}"]
    else:
        out.insert(1, record["expression"])  # positional: right after the actor
    out.append(f"--name={record['name']}")
    for key in ("start", "end", "timezone", "catch_up", "catch_up_window", "max_age", "overlap_ttl", "description"):
        if record[key] is not None:
            out.append(f"--{key.replace('_', '-')}={record[key]}")
    for key in ("grace", "max_runtime", "failure_threshold", "jitter", "overlap"):
        if record[key] is not None:
            out.append(f"--{key.replace('_', '-')}={record[key]}")
    for key in ("args", "kwargs", "options"):
        out.append(f"--{key}={json.dumps(record[key])}")
    return out


@_SETTINGS
@given(schedule=schedules(), name=_NAMES, new_name=_NAMES)
def test_a_rename_in_the_edit_form_keeps_every_other_option(
    cron: CronMiddleware, schedule: Schedule, name: str, new_name: str
) -> None:
    """A rename is a new schedule: stored under the new name with every
    option of the old one, the old one removed."""
    if new_name == name:
        return
    cron.remove(ACTOR, new_name)
    before = cron.add(ACTOR, schedule, name=name)
    form = forms.RuntimeForm.of(before.schedule)
    posted = {f.name: str(getattr(form, f.name)) for f in dataclasses.fields(form) if f.name != "errors"}
    form = forms.RuntimeForm.parse({**posted, "name": new_name})
    saved = forms.save(cron.service, form, original=before.schedule.id, actors=[ACTOR], who="test")
    assert isinstance(saved, forms.Saved), saved
    after = cron.runtime.get(ACTOR, new_name)
    assert cron.runtime.get(ACTOR, name) is None and after is not None
    assert _definition(after.schedule) == dataclasses.replace(_definition(before.schedule), name=new_name)


_ACTORS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=examples(300), deadline=None)
@given(actor=_ACTORS, name=st.none() | _NAMES, runtime=st.booleans())
def test_a_schedule_id_parses_back_to_its_parts(actor: str, name: str | None, runtime: bool) -> None:
    """``parse_id(format_id(...))`` gives back the parts, for every actor a
    runtime schedule may have (no ``/`` or ``:``), and for a declared
    schedule's name whatever its actor is called."""
    if runtime and (name is None or "/" in actor or ":" in actor):
        return
    if not runtime and name is None and parse_id(actor) != ScheduleId(actor):
        return  # an unnamed schedule of an actor named like an id: see ids.py
    parsed = parse_id(format_id(actor, name, runtime=runtime))
    assert parsed == ScheduleId(actor, name, runtime=runtime)


def test_an_update_may_turn_a_one_shot_into_a_recurring_schedule_and_back(cron: CronMiddleware) -> None:
    """One kind of timing replaces another in an update (the Edit form's
    switch of kind): an expression clears ``at``; ``at`` clears the
    expression, the interval and ``start``/``end``; the rest is kept."""
    at = NOW_MS + 86_400_000
    cron.add(ACTOR, at=at, name="switch", description="kept")
    recurring = cron.update(f"{ACTOR}:switch", expression="0 9 * * *")
    assert (recurring.schedule.at, recurring.schedule.expression) == (None, "0 9 * * *")
    bounded = cron.update(f"{ACTOR}:switch", start=NOW_MS, end=NOW_MS + 10 * 86_400_000)
    assert bounded.schedule.start == NOW_MS
    once = cron.update(f"{ACTOR}:switch", at=at)
    assert (once.schedule.at, once.schedule.start, once.schedule.description) == (at, at, "kept")


_ACTOR_NAMES = st.sampled_from(["acc", "acc_two", "b", "report_x"])
_SCHEDULE_NAMES = st.sampled_from(["two", "acc_two", "b", "daily", "x.1"])


@st.composite
def apps(draw: st.DrawFn) -> tuple[dict[str, list[str | None]], list[tuple[str, str]]]:
    """Declared actors with their schedules' names (None: the actor's
    unnamed schedule, at most one each; names shared across actors and with
    actor names, as real apps have them), and runtime ``(actor, name)``s."""
    declared = {
        actor: draw(st.lists(st.none() | _SCHEDULE_NAMES, min_size=1, max_size=3, unique=True))
        for actor in draw(st.lists(_ACTOR_NAMES, min_size=1, max_size=3, unique=True))
    }
    runtime = draw(st.lists(st.tuples(st.sampled_from(sorted(declared)), _SCHEDULE_NAMES), max_size=3, unique=True))
    return declared, runtime


@settings(max_examples=examples(60), deadline=None)
@given(app=apps())
def test_every_id_list_prints_is_the_target_of_trigger_pause_resume_and_remove(
    app: tuple[dict[str, list[str | None]], list[tuple[str, str]]],
) -> None:
    """Given any app (unnamed and named declared schedules, runtime ones,
    names shared with other actors), on the memory store: every schedule id
    the listing prints, given as the commands' target (the CLI's positional
    name, the dashboard's ``schedule`` field), is exactly that schedule for
    trigger, pause and resume; every runtime id is removed by ``remove``."""
    declared, runtime = app
    broker = StubBroker()
    middleware = CronMiddleware()
    broker.add_middleware(middleware)
    for actor, names in declared.items():
        crons = [Schedule("0 9 * * *", name=name) for name in names]
        dramatiq.actor(lambda: None, actor_name=actor, broker=broker, cron=crons)
    simulator = CronSimulator(broker, now=NOW)
    try:
        service = middleware.service
        for actor, name in runtime:
            service.add(actor, "0 10 * * *", name=name)
        listed = [s.id for s in middleware.all_schedules()] + [r.schedule.id for r in service.list().items]
        assert len(set(listed)) == len(listed)
        for schedule_id in listed:
            for target in (service.target(name=schedule_id), service.target(schedule_id)):
                assert target.schedule is not None and target.schedule.id == schedule_id
            done = service.trigger(target=service.target(name=schedule_id), who="test")
            assert service.history(limit=1)[0].message_id == done.message_id
            assert service.pause(target=service.target(name=schedule_id)).target == schedule_id
            assert service.paused() == {schedule_id}
            assert service.resume(target=service.target(name=schedule_id, resuming=True)).changed
        for actor, name in runtime:
            assert service.remove(f"{actor}:{name}") and service.get(f"{actor}:{name}") is None
    finally:
        simulator.close()
        broker.close()
