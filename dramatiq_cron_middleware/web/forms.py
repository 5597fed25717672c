"""The runtime schedule form: reading it, checking it, saving it.

Validation is the API's own: the form builds a
:class:`~dramatiq_cron_middleware.Schedule` and hands it to the runtime
schedules' ``add``, which raises the same ``CronScheduleError`` (with the
same message) a program calling it would get; the page shows that message
beside the form.  Only what a form adds of its own (JSON in a text box, an
actor picked from a list) is checked here first.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ..errors import CronConfigurationError, CronScheduleError
from ..middleware import CronMiddleware
from ..schedules.schedule import BoundSchedule, Schedule

__all__ = ["RuntimeForm", "runtime_of", "save"]


@dataclasses.dataclass(frozen=True)
class RuntimeForm:
    """What the add/edit form holds, as typed (strings), plus an error."""

    actor: str = ""
    name: str = ""
    expression: str = ""
    timezone: str = ""
    args: str = "[]"
    kwargs: str = "{}"
    #: Run monitoring's thresholds (ms, ms, runs); empty: the middleware's.
    grace: str = ""
    max_runtime: str = ""
    failure_threshold: str = ""
    error: str | None = None

    @classmethod
    def parse(cls, form: Mapping[str, str]) -> RuntimeForm:
        """The form as posted."""
        return cls(
            actor=form.get("actor", "").strip(),
            name=form.get("name", "").strip(),
            expression=form.get("expression", "").strip(),
            timezone=form.get("timezone", "").strip(),
            args=form.get("args", "").strip() or "[]",
            kwargs=form.get("kwargs", "").strip() or "{}",
            grace=form.get("grace", "").strip(),
            max_runtime=form.get("max_runtime", "").strip(),
            failure_threshold=form.get("failure_threshold", "").strip(),
        )

    @classmethod
    def of(cls, schedule: BoundSchedule) -> RuntimeForm:
        """The form filled in from a saved schedule (for editing)."""
        return cls(
            actor=schedule.actor_name,
            name=schedule.name,
            expression=schedule.expression,
            timezone=schedule.timezone,
            args=json.dumps(list(schedule.args)),
            kwargs=json.dumps(schedule.kwargs, sort_keys=True),
            grace=_text(schedule.grace),
            max_runtime=_text(schedule.max_runtime),
            failure_threshold=_text(schedule.failure_threshold),
        )

    def monitoring(self) -> dict[str, Any]:
        """``grace``, ``max_runtime`` and ``failure_threshold`` as the
        schedule takes them (None when empty).

        Raises:
          ValueError: one is not a whole number; the message names it.
        """
        out: dict[str, Any] = {}
        for field in ("grace", "max_runtime", "failure_threshold"):
            text = getattr(self, field)
            if text and not text.lstrip("-").isdigit():
                raise ValueError(f"{field} must be a whole number (or empty for the middleware's), got {text!r}")
            out[field] = int(text) if text else None
        return out


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


def save(store: Any, form: RuntimeForm, *, original: str | None) -> str | None:
    """Add the schedule the form describes (replacing ``original``, an
    ``actor:name``, when editing); returns the error to show, or None when
    saved.  An unknown actor, a bad name, expression or zone is refused by
    ``RuntimeSchedules.add`` itself, with its own message."""
    if not form.actor:
        return "Choose an actor."
    if not form.name:
        return "A runtime schedule needs a name (its identity in the ledger)."
    try:
        args = json.loads(form.args)
        kwargs = json.loads(form.kwargs)
    except ValueError as exc:
        return f"args and kwargs must be JSON: {exc}"
    if not isinstance(args, list):
        return f"args must be a JSON array, got {form.args!r}"
    if not isinstance(kwargs, dict):
        return f"kwargs must be a JSON object, got {form.kwargs!r}"
    try:
        monitoring = form.monitoring()
    except ValueError as exc:
        return str(exc)
    old_actor, sep, old_name = (original or "").partition(":")
    try:
        previous = store.get(old_actor, old_name) if sep else None
        schedule = _schedule(form, args, kwargs, None if previous is None else previous.schedule, monitoring)
        store.add(form.actor, schedule, name=form.name)
    except CronScheduleError as exc:
        return str(exc)
    if sep and (old_actor, old_name) != (form.actor, form.name):
        # A rename: the new one is stored, so the old one can go.
        store.remove(old_actor, old_name)
    return None


def _schedule(
    form: RuntimeForm,
    args: list[Any],
    kwargs: dict[str, Any],
    previous: BoundSchedule | None,
    monitoring: dict[str, Any],
) -> Schedule:
    """The schedule the form describes.  When editing, every option the form
    does not show (catch-up, jitter, max_age, overlap, bounds, message
    options) keeps its stored value, and an interval schedule whose label
    was left as it was stays that interval."""
    if previous is None:
        return Schedule(form.expression, timezone=form.timezone or None, args=tuple(args), kwargs=kwargs, **monitoring)
    kept: dict[str, Any] = {
        "catch_up": previous.catch_up,
        "catch_up_window": previous.catch_up_window,
        "jitter": previous.jitter,
        "max_age": previous.max_age,
        "overlap": previous.overlap,
        "overlap_ttl": previous.overlap_ttl,
        "options": previous.options,
        "start": previous.start,
        "end": previous.end,
    }
    if previous.every is not None and form.expression == previous.expression:
        kept.update(every=previous.every, offset=previous.offset)
        expression = None
    else:
        expression = form.expression
    return Schedule(expression, timezone=form.timezone or None, args=tuple(args), kwargs=kwargs, **kept, **monitoring)


def runtime_of(middleware: CronMiddleware) -> Any:
    """The app's runtime schedules (``CronMiddleware.runtime``), or None
    when this version of the package, or this app, has none."""
    if not hasattr(type(middleware), "runtime"):
        return None
    try:
        return getattr(middleware, "runtime")  # noqa: B009 - absent from older versions
    except CronConfigurationError:  # no actor declared yet: nothing to schedule
        return None
