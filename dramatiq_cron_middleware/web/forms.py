"""The runtime schedule form: reading it, checking it, saving it.

Validation is the API's own: each option the form sets is checked on its
own by :func:`~dramatiq_cron_middleware.schedules.schedule.bind_schedule`,
the rule book of every schedule, so a form with three mistakes shows three
messages at once, each the one a program calling the API would get.  The
whole schedule is then handed to the runtime schedules' ``add``, which
checks what only the whole can tell (arguments against the actor's
signature).  Only what a form adds of its own (numbers and JSON typed in
text boxes, an actor picked from a list) is checked here first.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CronConfigurationError, CronScheduleError
from ..middleware import CronMiddleware
from ..schedules.schedule import (
    DEFAULT_CATCH_UP_WINDOW,
    NAME_PATTERN,
    NAME_RULE,
    BoundSchedule,
    Schedule,
    bind_schedule,
    of_actor,
)
from ..store.runtime import describe_changes

__all__ = ["CATCH_UPS", "OVERLAPS", "RuntimeForm", "Saved", "runtime_of", "save"]

#: The choices of the catch-up and overlap selects ("" keeps the default).
CATCH_UPS = ("", "each", "latest", "none")
OVERLAPS = ("allow", "skip")
# Options typed as whole numbers (milliseconds, but the failed runs of
# failure_threshold); "" means the default (None).
_MS_FIELDS = ("every", "offset", "catch_up_window", "jitter", "max_age", "grace", "max_runtime")
_NUMBER_FIELDS = (*_MS_FIELDS, "failure_threshold")
# A valid expression, against which one option at a time is checked.
_PROBE = "0 0 * * *"


@dataclasses.dataclass(frozen=True)
class RuntimeForm:
    """What the add/edit form holds, as typed (strings), plus its errors
    (field name -> message; ``form`` for what belongs to no one field)."""

    actor: str = ""
    name: str = ""
    expression: str = ""
    every: str = ""
    offset: str = ""
    timezone: str = ""
    args: str = "[]"
    kwargs: str = "{}"
    catch_up: str = ""
    catch_up_window: str = ""
    jitter: str = ""
    max_age: str = ""
    overlap: str = "allow"
    #: Run monitoring's thresholds (ms, ms, runs); empty: the middleware's.
    grace: str = ""
    max_runtime: str = ""
    failure_threshold: str = ""
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, form: Mapping[str, str], *, base: RuntimeForm | None = None) -> RuntimeForm:
        """The form as posted; a field the post leaves out (a script posting
        only what it changes) keeps its value in ``base``, the stored
        schedule's form when editing."""
        fallback = base or cls()
        text: dict[str, str] = {
            f.name: form[f.name].strip() if f.name in form else str(getattr(fallback, f.name))
            for f in dataclasses.fields(cls)
            if f.name != "errors"
        }
        text["args"] = text["args"] or "[]"
        text["kwargs"] = text["kwargs"] or "{}"
        text["overlap"] = text["overlap"] or "allow"
        return cls(**text)  # type: ignore[arg-type]

    @classmethod
    def of(cls, schedule: BoundSchedule) -> RuntimeForm:
        """The form filled in from a saved schedule (for editing)."""
        interval = schedule.every is not None
        return cls(
            actor=schedule.actor_name,
            name=schedule.name,
            expression="" if interval else schedule.expression,
            every=str(schedule.every) if interval else "",
            offset=str(schedule.offset) if interval and schedule.offset else "",
            timezone=schedule.timezone,
            args=json.dumps(list(schedule.args)),
            kwargs=json.dumps(schedule.kwargs, sort_keys=True),
            catch_up=schedule.catch_up,
            catch_up_window=str(schedule.catch_up_window),
            jitter=str(schedule.jitter) if schedule.jitter else "",
            max_age="" if schedule.max_age is None else str(schedule.max_age),
            overlap=schedule.overlap,
            grace="" if schedule.grace is None else str(schedule.grace),
            max_runtime="" if schedule.max_runtime is None else str(schedule.max_runtime),
            failure_threshold="" if schedule.failure_threshold is None else str(schedule.failure_threshold),
        )


@dataclasses.dataclass(frozen=True)
class Saved:
    """What :func:`save` stored, and what it replaced (None for an add)."""

    stored: Any
    previous: Any

    @property
    def schedule_id(self) -> str:
        """The id saved."""
        return str(self.stored.id)

    @property
    def change(self) -> str:
        """What changed, for the audit: the definition in brief for an
        add, the changed fields for an update."""
        if self.previous is None:
            return f"{self.stored.schedule.expression} in {self.stored.schedule.timezone}"
        return describe_changes(self.previous, self.stored)


def save(store: Any, form: RuntimeForm, *, original: str | None, actors: Sequence[str]) -> Saved | dict[str, str]:
    """Add the schedule the form describes (replacing ``original``, an
    ``actor:name``, when editing); returns what was saved, or every error
    found (field -> message) with nothing written."""
    errors: dict[str, str] = {}
    if not form.actor:
        errors["actor"] = "Choose an actor."
    elif form.actor not in actors:
        errors["actor"] = f"No actor {form.actor!r} is declared."
    if not NAME_PATTERN.match(form.name):
        errors["name"] = f"A {NAME_RULE}, got {form.name!r}."
    numbers: dict[str, int | None] = {}
    for field in _NUMBER_FIELDS:
        value = getattr(form, field)
        if value and not (value.isdigit() or (value[:1] == "-" and value[1:].isdigit())):
            unit = "milliseconds" if field in _MS_FIELDS else "failed runs"
            errors[field] = f"{field} is a whole number of {unit}, got {value!r}."
        numbers[field] = int(value) if value and field not in errors else None
    args, kwargs = _json(form, errors)
    if form.catch_up not in CATCH_UPS:
        errors["catch_up"] = f"catch-up is one of {', '.join(CATCH_UPS[1:])}, got {form.catch_up!r}."
    if form.overlap not in OVERLAPS:
        errors["overlap"] = f"overlap is one of {', '.join(OVERLAPS)}, got {form.overlap!r}."
    if bool(form.expression) == (numbers["every"] is not None or "every" in errors):
        errors.setdefault("expression", "Give an expression or an interval (every), not both, nor neither.")
    options: dict[str, Any] = {
        "timezone": form.timezone or None,
        "catch_up": form.catch_up or None,
        "catch_up_window": numbers["catch_up_window"],
        "jitter": numbers["jitter"] or 0,
        "max_age": numbers["max_age"],
        "overlap": form.overlap,
        "grace": numbers["grace"],
        "max_runtime": numbers["max_runtime"],
        "failure_threshold": numbers["failure_threshold"],
    }
    timing: dict[str, Any] = (
        {"expression": form.expression}
        if form.expression
        else {"every": numbers["every"], "offset": numbers["offset"] or 0}
    )
    # Each option alone against a valid expression, so each error is its own.
    probes: dict[str, dict[str, Any]] = {"expression" if form.expression else "every": timing}
    probes.update({field: {"expression": _PROBE, field: value} for field, value in options.items()})
    for field, probe in probes.items():
        if field in errors or (field == "every" and numbers["every"] is None):
            continue
        try:
            with of_actor(form.actor or "actor"):
                _bind(form.actor or "actor", Schedule(**probe, name=form.name if "name" not in errors else None))
        except CronScheduleError as exc:
            errors[field] = str(exc)
    if errors:
        return errors
    old_actor, sep, old_name = (original or "").partition(":")
    try:
        previous = store.get(old_actor, old_name) if sep else None
        with of_actor(form.actor):  # a Schedule checks itself before it knows its actor
            schedule = Schedule(
                **timing, args=tuple(args), kwargs=kwargs, **{k: v for k, v in options.items() if v is not None}
            )
            if previous is not None:
                schedule = _keep(schedule, previous.schedule)
        stored = store.add(form.actor, schedule, name=form.name)
    except CronScheduleError as exc:
        return {"form": str(exc)}
    if sep and (old_actor, old_name) != (form.actor, form.name):
        # A rename: the new one is stored, so the old one can go.
        store.remove(old_actor, old_name)
    return Saved(stored=stored, previous=previous)


def _json(form: RuntimeForm, errors: dict[str, str]) -> tuple[list[Any], dict[str, Any]]:
    parsed: dict[str, Any] = {}
    for field, kind, word in (("args", list, "array"), ("kwargs", dict, "object")):
        try:
            value = json.loads(getattr(form, field))
        except ValueError as exc:
            errors[field] = f"{field} must be JSON: {exc}"
            continue
        if not isinstance(value, kind):
            errors[field] = f"{field} must be a JSON {word}, got {getattr(form, field)!r}"
        parsed[field] = value
    return list(parsed.get("args") or []), dict(parsed.get("kwargs") or {})


def _bind(actor: str, schedule: Schedule) -> BoundSchedule:
    return bind_schedule(
        actor, "default", schedule, timezone="UTC", catch_up="each", catch_up_window=DEFAULT_CATCH_UP_WINDOW
    )


def _keep(schedule: Schedule, previous: BoundSchedule) -> Schedule:
    """When editing, what the form does not show (overlap expiry, start and
    end, message options) keeps its stored value."""
    return dataclasses.replace(
        schedule,
        overlap_ttl=previous.overlap_ttl,
        options=previous.options,
        start=previous.start,
        end=previous.end,
    )


def runtime_of(middleware: CronMiddleware) -> Any:
    """The app's runtime schedules (``CronMiddleware.runtime``), or None
    when this version of the package, or this app, has none."""
    if not hasattr(type(middleware), "runtime"):
        return None
    try:
        return getattr(middleware, "runtime")  # noqa: B009 - absent from older versions
    except CronConfigurationError:  # no actor declared yet: nothing to schedule
        return None
