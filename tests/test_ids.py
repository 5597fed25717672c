"""The one schedule-id grammar (schedules/ids.py): every id a schedule has
formats back from its parse, and what an operator or a caller gives as a
runtime schedule's id or parts is refused, naming it, when no schedule can
have it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dramatiq_cron_middleware.errors import CronScheduleError
from dramatiq_cron_middleware.schedules.ids import (
    NAME_PATTERN,
    check_declared_actor,
    format_id,
    parse_id,
    runtime_id,
    split_runtime_id,
)
from dramatiq_cron_middleware.schedules.schedule import bind_schedule, schedules_for_actor
from tests.support.examples import examples

_NAMES = st.from_regex(NAME_PATTERN, fullmatch=True)
# What dramatiq accepts as a declared cron actor's name: anything without ':'.
_DECLARED = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=20).filter(
    lambda a: ":" not in a
)
_RUNTIME_ACTORS = _DECLARED.filter(lambda a: "/" not in a)


def _bound_id(actor: str, name: str | None, *, runtime: bool) -> str:
    """The id the one rule book gives such a schedule."""
    schedule = bind_schedule(
        actor,
        "default",
        "* * * * *",
        timezone="UTC",
        catch_up="each",
        catch_up_window=0,
        name=name,
        source="runtime" if runtime else "code",
    )
    return schedule.id


@settings(max_examples=examples(300), deadline=None)
@given(actor=_RUNTIME_ACTORS, name=_NAMES)
def test_a_runtime_id_formats_back_from_its_parse(actor: str, name: str) -> None:
    text = _bound_id(actor, name, runtime=True)
    parsed = parse_id(text)
    assert parsed.runtime and format_id(parsed.actor, parsed.name, runtime=True) == text
    assert split_runtime_id(text) == (actor, name) and runtime_id(actor, name) == text


@settings(max_examples=examples(300), deadline=None)
@given(actor=_DECLARED, name=st.none() | _NAMES)
def test_a_declared_id_formats_back_from_its_parse(actor: str, name: str | None) -> None:
    text = _bound_id(actor, name, runtime=False)
    parsed = parse_id(text)
    assert not parsed.runtime
    assert format_id(parsed.actor, parsed.name, runtime=False) == text


@pytest.mark.parametrize(
    ("given_id", "message"),
    [
        ("nightly", "a runtime schedule's id is 'actor:name' \\(see list\\), got 'nightly' \\(a declared schedule"),
        ("", "got ''"),
        (":name", "got ':name'"),
        ("actor:", "got 'actor:'"),
        (42, "got 42"),
        ("actor:bad name", "got 'bad name'"),
        ("actor:a:b", "got 'a:b'"),
        ("a/b:name", "actor name 'a/b' must be non-empty, without ':' or '/'"),
    ],
)
def test_a_runtime_id_no_schedule_can_have_is_refused_naming_it(given_id: object, message: str) -> None:
    with pytest.raises(CronScheduleError, match=message):
        split_runtime_id(given_id)


def test_runtime_parts_and_declared_actors_are_refused_naming_them() -> None:
    with pytest.raises(CronScheduleError, match=r"runtime schedule of 'job': name must be .* got 'x/y'"):
        runtime_id("job", "x/y")
    with pytest.raises(CronScheduleError, match="actor 'a:b': a cron actor's name cannot contain ':'"):
        check_declared_actor("a:b")
    with pytest.raises(CronScheduleError, match="actor 'a:b': a cron actor's name cannot contain ':'"):
        schedules_for_actor("a:b", "default", "* * * * *", timezone="UTC", catch_up="each", catch_up_window=0)


def test_hashed_fields_hash_the_declared_form_of_the_id_for_every_source() -> None:
    """``H`` picks its values from ``actor/name``, also for a runtime
    schedule (whose id is ``actor:name``): moving the grammar moved no tick."""
    for source in ("code", "runtime"):
        schedule = bind_schedule(
            "job", "q", "H H * * *", timezone="UTC", catch_up="each", catch_up_window=0, name="n", source=source
        )
        assert schedule.cadence.hash_id == "job/n"
