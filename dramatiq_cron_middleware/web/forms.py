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
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CronError
from ..schedule import BoundSchedule, Schedule

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
        )


def save(store: Any, form: RuntimeForm, *, actors: Sequence[str], original: str | None) -> str | None:
    """Add the schedule the form describes (replacing ``original`` when
    editing); returns the error to show, or None when saved."""
    if not form.actor:
        return "Choose an actor."
    if form.actor not in actors:
        return f"unknown actor {form.actor!r}"
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
    schedule = Schedule(
        form.expression, timezone=form.timezone or None, name=form.name, args=tuple(args), kwargs=kwargs
    )
    old = store.find(original) if original else None
    try:
        store.add(form.actor, schedule, name=form.name)
    except CronError as exc:
        return str(exc)
    if old is not None and (old.actor_name, old.name) != (form.actor, form.name):
        store.remove(old.actor_name, old.name)
    return None


def runtime_of(middleware: Any, client: Any) -> Any:
    """The runtime schedules of the app, when this version has them."""
    return None
