"""The runtime schedule form: reading it, checking it, saving it.

Validation is the API's own: each option the form sets is checked on its
own by :func:`~dramatiq_cron_middleware.schedules.schedule.bind_schedule`,
the rule book of every schedule, so a form with three mistakes shows three
messages at once, each the one a program calling the API would get.  Only
what a form adds of its own (numbers, instants and JSON typed in text
boxes, an actor picked from a list) is checked here first.

Saving an edit is an update of the stored definition, the Python API's
(:meth:`~dramatiq_cron_middleware.store.runtime.RuntimeSchedules.update`):
only the options whose value the form changed are sent, so what the form
does not show (the overlap guard's expiry, message options) and what it
shows unchanged keep their stored values.  A new schedule is the form's
options handed to the runtime schedules' ``add``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CronScheduleError
from ..schedules.instants import instant_ms
from ..schedules.schedule import (
    DEFAULT_CATCH_UP_WINDOW,
    NAME_PATTERN,
    NAME_RULE,
    BoundSchedule,
    Schedule,
    bind_schedule,
    of_actor,
)
from ..service import Cron
from ..times import iso

__all__ = ["CATCH_UPS", "OVERLAPS", "RuntimeForm", "Saved", "save"]

#: The choices of the catch-up and overlap selects ("" keeps the default).
CATCH_UPS = ("", "each", "latest", "none")
OVERLAPS = ("allow", "skip")
# Options typed as whole numbers (milliseconds, but the failed runs of
# failure_threshold); "" means the default (None).
_MS_FIELDS = ("every", "offset", "catch_up_window", "jitter", "max_age", "grace", "max_runtime")
_NUMBER_FIELDS = (*_MS_FIELDS, "failure_threshold")
# Options typed as instants (ISO 8601 with an offset, or epoch ms).
_INSTANT_FIELDS = ("at", "start", "end")
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
    #: A one-shot's instant, instead of an expression or an interval.
    at: str = ""
    start: str = ""
    end: str = ""
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
    #: What the schedule is for, as typed (kept as it is, spaces included).
    description: str = ""
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, form: Mapping[str, str], *, base: RuntimeForm | None = None) -> RuntimeForm:
        """The form as posted; a field the post leaves out (a script posting
        only what it changes) keeps its value in ``base``, the stored
        schedule's form when editing."""
        fallback = base or cls()
        text: dict[str, str] = {}
        for f in dataclasses.fields(cls):
            if f.name == "errors":
                continue
            if f.name not in form:
                text[f.name] = str(getattr(fallback, f.name))
            elif f.name == "description":
                # A textarea sends its line breaks as CRLF.
                text[f.name] = form[f.name].replace("\r\n", "\n")
            else:
                text[f.name] = form[f.name].strip()
        text["args"] = text["args"] or "[]"
        text["kwargs"] = text["kwargs"] or "{}"
        text["overlap"] = text["overlap"] or "allow"
        return cls(**text)  # type: ignore[arg-type]

    @classmethod
    def of(cls, schedule: BoundSchedule) -> RuntimeForm:
        """The form filled in from a saved schedule (for editing)."""
        one_shot = schedule.at is not None
        interval = schedule.every is not None and not one_shot
        return cls(
            actor=schedule.actor_name,
            name=schedule.name,
            expression="" if interval or one_shot else schedule.expression,
            every=str(schedule.every) if interval else "",
            offset=str(schedule.offset) if interval and schedule.offset else "",
            at=iso(schedule.at, schedule.zone) if schedule.at is not None else "",
            start="" if one_shot or schedule.start is None else iso(schedule.start, schedule.zone),
            end="" if one_shot or schedule.end is None else iso(schedule.end, schedule.zone),
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
            description=schedule.description,
        )


@dataclasses.dataclass(frozen=True)
class Saved:
    """What :func:`save` stored, and what it replaced (None for an add);
    ``changed`` is False when an edit changed nothing (nothing written)."""

    stored: Any
    previous: Any
    changed: bool = True

    @property
    def schedule_id(self) -> str:
        """The id saved."""
        return str(self.stored.id)


def save(
    cron: Cron, form: RuntimeForm, *, original: str | None, actors: Sequence[str], who: str
) -> Saved | dict[str, str]:
    """Add the schedule the form describes, or (``original``, the id of a
    stored runtime schedule, when editing) update that one with what the
    form changed, through the service (which records it as done by
    ``who``); returns what was saved, or every error found (field ->
    message) with nothing written."""
    errors: dict[str, str] = {}
    values = _values(form, errors)
    if form.actor and form.actor not in actors:
        errors["actor"] = f"No actor {form.actor[:80]!r} is declared."
    if errors:
        return errors
    try:
        previous = cron.get(original) if original else None
    except CronScheduleError as exc:
        return {"form": str(exc)}
    if original and previous is None:
        return {"form": f"There is no runtime schedule {original!r} any more (removed meanwhile?)."}
    try:
        if previous is None:
            with of_actor(form.actor):  # a Schedule checks itself before it knows its actor
                schedule = Schedule(**{k: v for k, v in values.items() if v is not None})
            return Saved(stored=cron.add(form.actor, schedule, name=form.name, who=who), previous=None)
        changes = _changes(values, cron.options(previous.schedule))
        if (form.actor, form.name) != (previous.actor_name, previous.name):
            # A rename is a new schedule (an update keeps the id): the new
            # one stored, with every option of the old one the form did not
            # change, then the old one removed.
            renamed = cron.changed(previous.schedule, {**changes, "name": form.name})
            stored = cron.rename(previous, renamed, actor=form.actor, name=form.name, who=who)
            return Saved(stored=stored, previous=previous)
        if not changes:
            return Saved(stored=previous, previous=previous, changed=False)
        stored = cron.update(previous.id, who=who, **changes)
    except CronScheduleError as exc:
        return {"form": str(exc)}
    return Saved(stored=stored, previous=previous)


def _values(form: RuntimeForm, errors: dict[str, str]) -> dict[str, Any]:
    """The options the form sets, as the API takes them (None: the
    default); each bad one is an entry of ``errors``."""
    if not form.actor:
        errors["actor"] = "Choose an actor."
    if not NAME_PATTERN.match(form.name):
        errors["name"] = f"A {NAME_RULE}, got {form.name[:80]!r}."
    numbers: dict[str, int | None] = {}
    for field in _NUMBER_FIELDS:
        value = getattr(form, field)
        digits = value[1:] if value[:1] == "-" else value
        if value and not (digits.isascii() and digits.isdigit()):
            unit = "milliseconds" if field in _MS_FIELDS else "failed runs"
            errors[field] = f"{field} is a whole number of {unit}, got {value[:80]!r}."
        numbers[field] = int(value) if value and field not in errors else None
    instants: dict[str, int | None] = {}
    for field in _INSTANT_FIELDS:
        value = getattr(form, field)
        try:
            instants[field] = instant_ms(value) if value else None
        except ValueError as exc:
            errors[field] = f"{field}: {exc}"
            instants[field] = None
    args, kwargs = _json(form, errors)
    if form.catch_up not in CATCH_UPS:
        errors["catch_up"] = f"catch-up is one of {', '.join(CATCH_UPS[1:])}, got {form.catch_up[:80]!r}."
    if form.overlap not in OVERLAPS:
        errors["overlap"] = f"overlap is one of {', '.join(OVERLAPS)}, got {form.overlap[:80]!r}."
    kinds = [bool(form.expression), bool(form.every), bool(form.at)]
    if kinds.count(True) != 1:
        errors.setdefault(
            "expression", "Give one of an expression, an interval (every) or a one-shot (at): not two, nor none."
        )
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
        "description": form.description or None,
    }
    if form.at:
        timing: dict[str, Any] = {"at": instants["at"]}
    elif form.expression:
        timing = {"expression": form.expression}
    else:
        timing = {"every": numbers["every"], "offset": numbers["offset"] or 0}
    bounds = {"start": instants["start"], "end": instants["end"]}
    # Each option alone against a valid expression, so each error is its own.
    probes: dict[str, dict[str, Any]] = {next(iter(timing)): timing}
    probes.update({field: {"expression": _PROBE, field: value} for field, value in options.items()})
    if bounds["start"] is not None or bounds["end"] is not None:
        probes["end" if bounds["start"] is None else "start"] = {"expression": _PROBE, **bounds}
    for field, probe in probes.items():
        if field in errors or (field in ("every", "at") and None in probe.values()):
            continue
        try:
            with of_actor(form.actor or "actor"):
                _bind(form.actor or "actor", Schedule(**probe, name=form.name if "name" not in errors else None))
        except CronScheduleError as exc:
            errors[field] = str(exc)
    if "at" in timing:
        timing.update(expression=None, every=None, offset=0)
    else:
        timing.update({"at": None, **({"expression": None} if "every" in timing else {"every": None, "offset": 0})})
    return {**timing, **bounds, "args": tuple(args), "kwargs": kwargs, **options}


def _changes(values: Mapping[str, Any], stored: Schedule) -> dict[str, Any]:
    """The options whose value the form changed (a description that only
    lost its trailing spaces or CRs to a browser is unchanged)."""
    out: dict[str, Any] = {}
    for field, value in values.items():
        was = getattr(stored, field)
        if field == "description":
            same = (value or "").replace("\r\n", "\n") == (was or "").replace("\r\n", "\n")
        elif field in ("args", "kwargs"):
            same = json.dumps(value, sort_keys=True) == json.dumps(
                was if field == "kwargs" else list(was), sort_keys=True
            )
            value = tuple(value) if field == "args" else value
        else:
            same = value == was
        if not same:
            out[field] = value
    return out


def _json(form: RuntimeForm, errors: dict[str, str]) -> tuple[list[Any], dict[str, Any]]:
    parsed: dict[str, Any] = {}
    for field, kind, word in (("args", list, "array"), ("kwargs", dict, "object")):
        try:
            value = json.loads(getattr(form, field))
        except ValueError as exc:
            errors[field] = f"{field} must be JSON: {exc}"
            continue
        if not isinstance(value, kind):
            errors[field] = f"{field} must be a JSON {word}, got {getattr(form, field)[:80]!r}"
        parsed[field] = value
    return list(parsed.get("args") or []), dict(parsed.get("kwargs") or {})


def _bind(actor: str, schedule: Schedule) -> BoundSchedule:
    return bind_schedule(
        actor, "default", schedule, timezone="UTC", catch_up="each", catch_up_window=DEFAULT_CATCH_UP_WINDOW
    )
