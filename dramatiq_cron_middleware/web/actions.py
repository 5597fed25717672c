"""The dashboard's actions, one small handler each: pause and resume,
trigger, the confirmation page of a trigger or a removal, and the runtime
schedule form (show, save, remove).  Each acts through the operator service
(:class:`~dramatiq_cron_middleware.service.Cron`) as the request's user,
then answers with a redirect carrying a notice (``Dashboard.back``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from ..audit import TriggerRefused, check_who
from ..errors import CronScheduleError
from ..service import Cron
from ..targets import AmbiguousTarget, Target, UnknownTarget, find_runtime
from ..times import when
from . import forms
from .http import HTTPError, Request, Response
from .security import Access

__all__ = ["confirm", "pause", "runtime_form", "runtime_remove", "runtime_save", "trigger"]


class Dashboard(Protocol):
    """What the handlers use of the dashboard (app.py's ``CronDashboard``,
    which calls them: named here by what it offers)."""

    access: Access

    @property
    def cron(self) -> Cron: ...

    def known(self, path: str) -> bool: ...

    def actor_names(self) -> list[str]: ...

    def page(self, request: Request, name: str, context: dict[str, Any], *, status: str = "200 OK") -> Response: ...

    def back(self, request: Request, notice: str, *, default: str = "/") -> Response: ...


def pause(dash: Dashboard, request: Request) -> Response:
    """``POST /pause`` (``for``: a duration, optional) and ``POST /resume``."""
    target = _target(dash, request)
    # Both record themselves in the history, as done by the user.
    who = user(dash, request)
    if request.path == "/pause":
        lasting = request.form.get("for", "").strip() or None
        try:
            done = dash.cron.pause(target=target, duration=lasting, who=who)
        except CronScheduleError as exc:
            raise HTTPError("400 Bad Request", f"Refused: {exc}.") from None
        until = done.until_ms
        notice = f"Paused {target}" + (f" until {when(until)}" if until is not None else "") + "."
        if not done.changed:
            notice = f"{target} was already paused; now " + (f"until {when(until)}." if until else "until resumed.")
    else:
        done = dash.cron.resume(target=target, who=who)
        notice = f"Resumed {target}." if done.changed else f"{target} was not paused."
    return dash.back(request, notice)


def trigger(dash: Dashboard, request: Request) -> Response:
    """``POST /trigger``: the schedule's message enqueued now."""
    target = _target(dash, request)
    schedule = target.schedule
    if schedule is None:
        raise HTTPError("404 Not Found", f"Unknown cron schedule {target.member!r}.")
    try:  # recorded in the history as done by the user
        done = dash.cron.trigger(target=target, who=user(dash, request))
    except TriggerRefused as exc:
        raise HTTPError("409 Conflict", str(exc)) from None
    return dash.back(request, f"Triggered {schedule.id}: message {done.message_id} on queue {done.queue_name}.")


def confirm(dash: Dashboard, request: Request) -> Response:
    """The page that asks before a trigger or a removal (a GET: it works
    with JavaScript off); its button posts the action itself."""
    if request.path == "/trigger":
        schedule_id = request.query.get("schedule", "")
        schedule = dash.cron.find(schedule_id)
        field, verb = "schedule", "Trigger"
        what = "Its message is enqueued now, besides its regular ticks."
    else:
        schedule_id = request.query.get("id", "")
        schedule = find_runtime(dash.cron.runtime, schedule_id)
        field, verb = "id", "Remove"
        what = "It never fires again; its history stays. This cannot be undone."
    if schedule is None:
        raise HTTPError("404 Not Found", f"No schedule {schedule_id}.")
    back = request.query.get("next", "")
    if not dash.known(back.partition("?")[0]) or back.startswith("//"):
        back = "/schedules"
    context = {"schedule": schedule, "field": field, "verb": verb, "what": what, "back": back}
    return dash.page(request, "confirm.html", context)


def runtime_form(dash: Dashboard, request: Request) -> Response:
    """``GET /runtime/new`` (``actor`` preselected) and ``GET /runtime/edit?id=``."""
    store = dash.cron.runtime
    if request.path == "/runtime/edit":
        schedule = find_runtime(store, request.query.get("id", ""))
        if schedule is None:
            raise HTTPError("404 Not Found", "No such runtime schedule.")
        return _form_page(dash, request, forms.RuntimeForm.of(schedule), editing=True, original=schedule.id)
    return _form_page(dash, request, forms.RuntimeForm(actor=request.query.get("actor", "")), editing=False)


def runtime_save(dash: Dashboard, request: Request) -> Response:
    """``POST /runtime/new`` and ``/runtime/edit``: saved, or the form again with every error (400)."""
    store = dash.cron.runtime
    editing = request.path == "/runtime/edit"
    original = request.form.get("original", "") if editing else ""
    stored = find_runtime(store, original) if original else None
    form = forms.RuntimeForm.parse(request.form, base=None if stored is None else forms.RuntimeForm.of(stored))
    saved = forms.save(dash.cron, form, original=original or None, actors=dash.actor_names(), who=user(dash, request))
    if not isinstance(saved, forms.Saved):
        form = dataclasses.replace(form, errors=saved)
        return _form_page(dash, request, form, editing=editing, original=original, status="400 Bad Request")
    if not saved.changed:
        return dash.back(request, f"Nothing changed in runtime schedule {saved.schedule_id}.", default="/schedules")
    return dash.back(request, f"Saved runtime schedule {saved.schedule_id}.", default="/schedules")


def runtime_remove(dash: Dashboard, request: Request) -> Response:
    """``POST /runtime/remove``: the schedule removed, recorded with what it was."""
    schedule = find_runtime(dash.cron.runtime, request.form.get("id", ""))
    if schedule is None:
        raise HTTPError("404 Not Found", "No such runtime schedule.")
    was = f"was {schedule.expression} in {schedule.timezone}"
    dash.cron.remove(schedule.actor_name, schedule.name, who=user(dash, request), detail=was)
    return dash.back(request, f"Removed runtime schedule {schedule.id}.", default="/schedules")


def _form_page(
    dash: Dashboard,
    request: Request,
    form: forms.RuntimeForm,
    *,
    editing: bool,
    original: str = "",
    status: str = "200 OK",
) -> Response:
    context = {"form": form, "editing": editing, "original": original, "actors": dash.actor_names()}
    return dash.page(request, "runtime_form.html", context, status=status)


def user(dash: Dashboard, request: Request) -> str:
    """Who the request acts as, as the audit records it."""
    who = dash.access.user(request.environ)[:200]
    try:
        return check_who(who)
    except CronScheduleError:  # a proxy's REMOTE_USER of control characters
        return "dashboard"


def _target(dash: Dashboard, request: Request) -> Target:
    """What a form names: ``schedule`` (a schedule's id, as every button
    posts it) or ``actor`` (a whole actor, as the resume of an actor
    paused as a whole posts it; for a trigger, an actor with a single
    schedule)."""
    form = request.form
    resuming = request.path == "/resume"
    try:
        if "schedule" in form:
            return dash.cron.target(form["schedule"], resuming=resuming)
        if "actor" in form and request.path == "/trigger":
            return dash.cron.target(name=form["actor"])
        if "actor" in form:
            return dash.cron.target(actor=form["actor"], resuming=resuming)
    except UnknownTarget as exc:
        raise HTTPError("404 Not Found", f"{str(exc).capitalize()}.") from None
    except AmbiguousTarget as exc:
        raise HTTPError("400 Bad Request", f"Refused: {exc}; choose one of them on the schedules page.") from None
    raise HTTPError("400 Bad Request", "No schedule named.")
