"""The dashboard's WSGI application: routing, the request cycle, and the
actions (pause, resume, trigger, runtime schedule forms).

Every page is rendered on the server and works with JavaScript off.  A
GET never changes anything; every change is a POST carrying the CSRF value
(see ``security.py``) and answered with a redirect, so reloading a page
never repeats an action.  Templates escape everything they print.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

import dramatiq
import redis
from dramatiq.logging import get_logger

from ..audit import check_who
from ..errors import CronScheduleError, CronUnavailableError
from ..middleware import find_middleware
from ..monitoring.read import runtime_of
from ..monitoring.records import ScheduleHealth
from ..ops.control import (
    AmbiguousTarget,
    Control,
    Target,
    TriggerRefused,
    UnknownTarget,
    find_runtime,
)
from ..schedules.outcome import Outcome
from ..schedules.schedule import BoundSchedule
from ..service import Cron
from ..status import Status, read_status, status_sets_json
from ..store.connection import describe as describe_client
from ..store.connection import redact, scheduler_clients
from ..store.health_reads import HealthReads
from ..store.timing import Timing
from ..times import iso, short_when, span, when
from . import forms, health_pages, pages
from .chart import OUTCOME_COLOURS, RUN_COLOURS, duration_chart
from .security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    LOOPBACK_HOSTS,
    TOKEN_COOKIE,
    Access,
    HostAllowlist,
    cookies,
    csrf_ok,
    new_csrf_value,
    same_origin,
)

__all__ = ["CronDashboard"]

StartResponse = Callable[..., Any]
WSGIEnviron = dict[str, Any]

# Short enough that an unreachable Redis shows promptly on a page, long
# enough for a loaded server (the same bound as the command).
# The cookie carrying the outcome of an action to the page it redirects to.
NOTICE_COOKIE = "cron_notice"
# A form is a handful of short fields; anything bigger is not ours.
_MAX_BODY = 64 * 1024
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
_SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
]


class _HTTPError(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass
class _Request:
    environ: WSGIEnviron
    #: The request's ``Host``, one the dashboard is allowed to answer for.
    host: str
    method: str
    path: str
    base: str
    query: dict[str, str]
    form: dict[str, str]
    csrf: str
    new_csrf: bool
    notice: str = ""

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """A link inside the dashboard, wherever it is mounted."""
        link = self.base + path
        if params:
            link += "?" + urlencode(params)
        return link


@dataclasses.dataclass
class _Response:
    status: str
    body: bytes
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)


class CronDashboard:
    """A web dashboard of a dramatiq app's cron scheduler, as a WSGI app.

    It shows the leader, the candidates and Redis; every schedule with its
    next runs, last outcome and health, the schedules that need attention
    first; each schedule's history and runs with charts; ``/health``, the
    JSON of ``dramatiq-cron check --json`` for probes (200, or 503 when a
    schedule is failing or missed or Redis is unreachable); and lets an
    operator pause, resume and trigger schedules, and add, edit and
    remove runtime schedules.  Mount it in any WSGI server, in Flask with
    ``DispatcherMiddleware``, in Django (``dramatiq_cron_middleware.web.django``)
    or run it alone with ``dramatiq-cron web APP``.

    Parameters:
      broker(dramatiq.Broker): The app's broker, carrying a
        :class:`~dramatiq_cron_middleware.CronMiddleware`.  Triggers are
        enqueued on it.
      prefix(str): The path the dashboard answers under when the server
        hands it the whole path (``"/cron"``: ``/cron/schedules``...).  A
        mount that already moved the prefix into ``SCRIPT_NAME`` (Flask's
        ``DispatcherMiddleware``, Django) works the same.  ``""`` serves it
        at the root.  Defaults to ``"/cron"``.
      read_only(bool): Show everything, change nothing: no buttons, and
        every POST is refused with 403.  Defaults to False.
      auth(tuple): ``(user, password)`` required as HTTP basic auth on every
        request.  Defaults to None.
      token(str): A bearer token required on every request instead
        (``Authorization: Bearer ...``, or ``?token=...`` once, kept in a
        cookie).  Defaults to None.
      unauthenticated(bool): Serve without checking any credential: say
        so only when something else guards every request (a login of the
        host application in front of the mount, an authenticating proxy, a
        loopback-only bind).  A dashboard with none of ``auth``, ``token``,
        ``read_only=True`` and this is refused.  Defaults to False.
      allowed_hosts(list): The ``Host`` names it answers for, as Django's
        ``ALLOWED_HOSTS`` (``"cron.example.com"``, ``".example.com"`` for a
        domain and its subdomains, ``"*"`` for any; ports ignored); any
        other host gets 400, which stops DNS rebinding.  Defaults to None,
        meaning this machine's loopback names only (``localhost``,
        ``127.0.0.1``, ``[::1]``).
      refresh_ms(int): How often the overview refreshes itself when
        JavaScript is on, in milliseconds; 0 turns it off.  Defaults to 5000.

    Raises:
      CronConfigurationError: the broker has no ``CronMiddleware``, no
        Redis can be found for it, or nothing says who may use it (none of
        ``auth``, ``token``, ``read_only``, ``unauthenticated``).
    """

    def __init__(
        self,
        broker: dramatiq.Broker,
        *,
        prefix: str = "/cron",
        read_only: bool = False,
        auth: tuple[str, str] | None = None,
        token: str | None = None,
        unauthenticated: bool = False,
        allowed_hosts: Sequence[str] | None = None,
        refresh_ms: int = 5000,
    ) -> None:
        from ..errors import CronConfigurationError

        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        middleware = find_middleware(broker, needed_by="CronDashboard")
        if token is not None and (not isinstance(token, str) or not token.strip()):
            kind = "empty" if isinstance(token, str) else f"a {type(token).__name__}, not a string"
            raise CronConfigurationError(f"CronDashboard: token= is {kind}; pass a token, or leave it out")
        if auth is not None and (
            not isinstance(auth, tuple) or len(auth) != 2 or not all(isinstance(p, str) and p for p in auth)
        ):
            shown = "(user, '***')" if isinstance(auth, tuple) and len(auth) == 2 else type(auth).__name__
            raise CronConfigurationError(
                f"CronDashboard: auth= wants (user, password), both non-empty strings, got {shown}"
            )
        credentials = auth is not None or token is not None
        if unauthenticated and credentials:
            raise CronConfigurationError("CronDashboard: unauthenticated=True contradicts auth= or token=; pass one")
        if not (credentials or read_only or unauthenticated):
            raise CronConfigurationError(
                "CronDashboard: refusing to serve a control panel that anyone who reaches it can use: pass "
                "auth=(user, password), token=..., or read_only=True, or unauthenticated=True when something in "
                "front (the host application's login, an authenticating proxy) guards every request"
            )
        if allowed_hosts is not None and (
            isinstance(allowed_hosts, str) or not all(isinstance(h, str) and h for h in allowed_hosts)
        ):
            raise CronConfigurationError(
                f"CronDashboard: allowed_hosts must be a list of host names, got {allowed_hosts!r}"
            )
        self.hosts = HostAllowlist(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts)
        self.broker = broker
        self.middleware = middleware
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.read_only = read_only
        self.access = Access(auth=auth, token=token)
        self.refresh_ms = refresh_ms
        # The Redis and the runtime schedules the middleware uses, as the
        # command reads them: the two cannot tell different stories.
        source = middleware.redis_source(broker)
        client, _ = scheduler_clients(source, op_timeout_ms=Timing.OPERATOR_TIMEOUT_MS, block_timeout_ms=0)
        self.control = Control(client=client, keys=middleware.keys, history_length=middleware.history_length)
        self.where = describe_client(client)
        self.runtime = runtime_of(middleware)
        self.runtime_index = None if self.runtime is None else pages.RuntimeIndex(self.runtime)
        self.health_cache = health_pages.ReportCache(
            lambda: health_pages.read_all(
                self.control, middleware.all_schedules(), self.runtime_index, policy=middleware.health_policy
            )
        )
        # Built now, so a missing Jinja2 fails here with the install hint.
        self._templates = _templates()
        self._routes: dict[tuple[str, str], Callable[[_Request], _Response]] = {
            ("GET", "/"): self._overview,
            ("GET", "/schedules"): self._schedules,
            ("GET", "/schedule"): self._history,
            ("GET", "/next"): self._next_to_run,
            ("POST", "/pause"): self._pause,
            ("POST", "/resume"): self._pause,
            ("GET", "/trigger"): self._confirm,
            ("POST", "/trigger"): self._trigger,
            ("GET", "/runtime/new"): self._runtime_form,
            ("POST", "/runtime/new"): self._runtime_save,
            ("GET", "/runtime/edit"): self._runtime_form,
            ("POST", "/runtime/edit"): self._runtime_save,
            ("GET", "/runtime/remove"): self._confirm,
            ("POST", "/runtime/remove"): self._runtime_remove,
            ("GET", "/health"): self._health,
        }

    # -- WSGI -----------------------------------------------------------------

    def __call__(self, environ: WSGIEnviron, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request."""
        try:
            response = self._respond(environ)
        except Exception:  # a bug must not leak a traceback (or a URL) into a page
            self.logger.exception("The cron dashboard failed to answer %s.", environ.get("PATH_INFO", ""))
            response = _Response("500 Internal Server Error", b"Internal error; see the server's log.")
            response.headers.append(("Content-Type", "text/plain; charset=utf-8"))
        headers = [*_SECURITY_HEADERS, *response.headers, ("Content-Length", str(len(response.body)))]
        start_response(response.status, headers)
        return [b"" if environ.get("REQUEST_METHOD", "").upper() == "HEAD" else response.body]

    def _respond(self, environ: WSGIEnviron) -> _Response:
        host = self.hosts.host_of(environ)
        if host is None:
            shown = str(environ.get("HTTP_HOST", ""))[:100]
            return self._plain(
                "400 Bad Request", f"This dashboard does not answer for the host {shown!r} (allowed_hosts)."
            )
        script = environ.get("SCRIPT_NAME", "").rstrip("/")
        path = environ.get("PATH_INFO", "") or "/"
        if self.prefix and (path == self.prefix or path.startswith(self.prefix + "/")):
            script, path = script + self.prefix, path[len(self.prefix) :] or "/"
        elif self.prefix and not script.endswith(self.prefix):
            return self._plain("404 Not Found", "Not found.")
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        if not self.access.allows(environ, query.get("token")):
            response = self._plain("401 Unauthorized", "Authentication required.")
            challenge = self.access.challenge()
            if challenge:
                response.headers.append(("WWW-Authenticate", challenge))
            return response
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        jar = cookies(environ)
        csrf = jar.get(CSRF_COOKIE) or ""
        new_csrf = len(csrf) < 16
        request = _Request(
            environ=environ,
            host=host,
            method=environ.get("REQUEST_METHOD", "GET").upper(),
            path=path,
            base=script,
            query=query,
            form={},
            csrf=new_csrf_value() if new_csrf else csrf,
            new_csrf=new_csrf,
            notice=unquote(jar.get(NOTICE_COOKIE, ""))[:300],
        )
        if self.access.token is not None and "token" in query:
            # Keep the token in a cookie and drop it from the address bar.
            rest = {k: v for k, v in query.items() if k != "token"}
            response = self._redirect(request, path, rest)
            cookie = _cookie(TOKEN_COOKIE, quote(query["token"], safe=""), script or "/")
            response.headers.append(("Set-Cookie", cookie))
            return response
        method = "GET" if request.method == "HEAD" else request.method
        handler = self._routes.get((method, path))
        if handler is None:
            if any(p == path for _, p in self._routes):
                return self._plain("405 Method Not Allowed", "Method not allowed.")
            context = {"message": "The dashboard has no such page.", "heading": "Not found"}
            return self._page(request, "error.html", context, status="404 Not Found")
        try:
            if method == "POST":
                self._check_post(request)
            response = handler(request)
        except _HTTPError as exc:
            heading = "Not found" if exc.status.startswith("404") else "Not done"
            context = {"message": exc.message, "heading": heading}
            response = self._page(request, "error.html", context, status=exc.status)
        except (redis.ConnectionError, redis.TimeoutError, CronUnavailableError) as exc:
            message = f"Redis at {self.where} cannot be reached ({type(exc).__name__})."
            context = {"message": message, "heading": "Not done"}
            response = self._page(request, "error.html", context, status="503 Service Unavailable")
        except redis.RedisError as exc:  # refused by ACLs, out of memory...: say so, without the details
            self.logger.warning("The cron dashboard got a Redis error: %s", redact(str(exc)))
            message = f"Redis at {self.where} refused the request ({type(exc).__name__}); see the server's log."
            context = {"message": message, "heading": "Not done"}
            response = self._page(request, "error.html", context, status="502 Bad Gateway")
        if request.new_csrf:
            response.headers.append(("Set-Cookie", _cookie(CSRF_COOKIE, request.csrf, script or "/")))
        return response

    def _check_post(self, request: _Request) -> None:
        if self.read_only:
            raise _HTTPError("403 Forbidden", "This dashboard is read-only: nothing can be changed from it.")
        if not same_origin(request.environ, request.host):
            raise _HTTPError("403 Forbidden", "Refused: the form was sent from another site.")
        request.form = _read_form(request.environ)
        # The cookie was missing when new_csrf is set: no form can match it.
        if request.new_csrf or not csrf_ok(request.csrf, request.form.get(CSRF_FIELD)):
            raise _HTTPError(
                "403 Forbidden", "Refused: the form's security token is missing or stale. Reload the page and retry."
            )

    # -- pages ----------------------------------------------------------------

    def _overview(self, request: _Request) -> _Response:
        context: dict[str, Any] = {"refresh_ms": self.refresh_ms, "lock_ttl": self.middleware.lock_ttl}
        try:
            context["status"] = self._status()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            declared = len(self.middleware.all_schedules())
            context.update(status=None, error=type(exc).__name__, declared=declared)
        return self._page(request, "overview.html", context)

    def _status(self) -> Status:
        """The status, with the kept health of every schedule (read first:
        its age is never negative)."""
        health = self.health_cache.get()
        return read_status(
            self.control,
            HealthReads(self.control.client, self.control.keys),
            self.middleware,
            runtime=self.runtime,
            declares=lambda actor: actor in self.broker.actors,
            where=self.where,
            health=health,
        )

    def _schedules(self, request: _Request) -> _Response:
        filters = pages.Filters.parse(request.query)
        code = self.middleware.all_schedules()
        problems: list[ScheduleHealth] = []
        healths: dict[str, ScheduleHealth] = {}
        try:
            if filters.health != "all":
                view = health_pages.filtered_view(self.control, self.health_cache.get(), filters)
            else:
                view = pages.schedules_view(self.control, code, self.runtime_index, filters)
            problems = self.health_cache.get().problems()
            healths = health_pages.health_of(
                self.control, [row.schedule for row in view.rows], policy=self.middleware.health_policy
            )
        except (redis.ConnectionError, redis.TimeoutError, CronUnavailableError) as exc:
            # What the app declares is known without Redis: list it, and
            # say that its state is not.
            error = f"Redis at {self.where} cannot be reached ({type(exc).__name__})"
            view = pages.declared_view(code, filters, now_ms=int(time.time() * 1000), error=error)
        context = {
            "view": view,
            "page_sizes": pages.PAGE_SIZES,
            "health_filters": pages.HEALTH_FILTERS,
            "problems": problems,
            "healths": healths,
        }
        return self._page(request, "schedules.html", context)

    def _next_to_run(self, request: _Request) -> _Response:
        now, runs = pages.next_to_run(self.control, self.middleware.all_schedules(), self.runtime_index)
        return self._page(request, "next.html", {"runs": runs, "now_ms": now})

    def _history(self, request: _Request) -> _Response:
        schedule_id = request.query.get("id", "")
        schedule, source = self._find(schedule_id)
        if schedule is None and not schedule_id:
            raise _HTTPError("404 Not Found", "No schedule named.")
        before = request.query.get("before") or None
        if before is not None and not _stream_id(before):
            raise _HTTPError("400 Bad Request", "Bad history cursor.")
        view = pages.history_view(self.control, schedule_id, schedule, source, before=before)
        if schedule is None and not view.rows and before is None:
            # Neither declared nor stored, and nothing recorded: a wrong id.
            raise _HTTPError("404 Not Found", f"No schedule {schedule_id} is declared, stored or recorded.")
        runs = health_pages.schedule_runs(self.control, schedule_id, schedule, policy=self.middleware.health_policy)
        return self._page(
            request, "history.html", {"view": view, "runs": runs, "runs_chart": duration_chart(runs.runs)}
        )

    def _health(self, request: _Request) -> _Response:
        """``/health``, for probes: the JSON of ``dramatiq-cron check
        --json``, answered 200, or 503 when a schedule is ``failing`` or
        ``missed`` (Nagios critical) or Redis cannot be reached (then the
        body is ``{"error": ...}``).  ``late`` and ``running_long`` (Nagios
        warning) answer 200: a probe that restarts or pages on them would
        act on a backed-up queue; ``dramatiq-cron check`` exits 1 for them.
        The report is the dashboard's kept one (see ``ReportCache``)."""
        try:
            status = self._status()
        except redis.RedisError as exc:
            error = f"Redis at {self.where} cannot be reached or refused the request ({type(exc).__name__})."
            return self._json("503 Service Unavailable", {"error": error})
        report = status.health.report
        document = {**report.to_json(), **status_sets_json(status)}
        return self._json("503 Service Unavailable" if report.exit_code >= 2 else "200 OK", document)

    # -- actions --------------------------------------------------------------

    def _pause(self, request: _Request) -> _Response:
        target = self._target(request)
        # Both record themselves in the history, as done by the user.
        who = self._user(request)
        if request.path == "/pause":
            lasting = request.form.get("for", "").strip() or None
            try:
                done = self.cron.pause(target=target, duration=lasting, who=who)
            except CronScheduleError as exc:
                raise _HTTPError("400 Bad Request", f"Refused: {exc}.") from None
            until = done.until_ms
            notice = f"Paused {target}" + (f" until {when(until)}" if until is not None else "") + "."
            if not done.changed:
                notice = f"{target} was already paused; now " + (f"until {when(until)}." if until else "until resumed.")
        else:
            done = self.cron.resume(target=target, who=who)
            notice = f"Resumed {target}." if done.changed else f"{target} was not paused."
        return self._back(request, notice)

    def _trigger(self, request: _Request) -> _Response:
        target = self._target(request)
        schedule = target.schedule
        if schedule is None:
            raise _HTTPError("404 Not Found", f"Unknown cron schedule {target.member!r}.")
        try:  # recorded in the history as done by the user
            done = self.cron.trigger(target=target, who=self._user(request))
        except TriggerRefused as exc:
            raise _HTTPError("409 Conflict", str(exc)) from None
        return self._back(request, f"Triggered {schedule.id}: message {done.message_id} on queue {done.queue_name}.")

    def _confirm(self, request: _Request) -> _Response:
        """The page that asks before a trigger or a removal (a GET: it works
        with JavaScript off); its button posts the action itself."""
        if request.path == "/trigger":
            schedule_id = request.query.get("schedule", "")
            schedule, _ = self._find(schedule_id)
            field, verb = "schedule", "Trigger"
            what = "Its message is enqueued now, besides its regular ticks."
        else:
            schedule_id = request.query.get("id", "")
            schedule = find_runtime(self._writable_runtime(), schedule_id)
            field, verb = "id", "Remove"
            what = "It never fires again; its history stays. This cannot be undone."
        if schedule is None:
            raise _HTTPError("404 Not Found", f"No schedule {schedule_id}.")
        back = request.query.get("next", "")
        if back.partition("?")[0] not in {p for _, p in self._routes} or back.startswith("//"):
            back = "/schedules"
        context = {"schedule": schedule, "field": field, "verb": verb, "what": what, "back": back}
        return self._page(request, "confirm.html", context)

    def _runtime_form(self, request: _Request) -> _Response:
        store = self._writable_runtime()
        if request.path == "/runtime/edit":
            schedule = find_runtime(store, request.query.get("id", ""))
            if schedule is None:
                raise _HTTPError("404 Not Found", "No such runtime schedule.")
            return self._form_page(request, forms.RuntimeForm.of(schedule), editing=True, original=schedule.id)
        form = forms.RuntimeForm(actor=request.query.get("actor", ""))
        return self._form_page(request, form, editing=False)

    def _runtime_save(self, request: _Request) -> _Response:
        store = self._writable_runtime()
        editing = request.path == "/runtime/edit"
        original = request.form.get("original", "") if editing else ""
        stored = find_runtime(store, original) if original else None
        form = forms.RuntimeForm.parse(request.form, base=None if stored is None else forms.RuntimeForm.of(stored))
        saved = forms.save(
            self.cron, form, original=original or None, actors=self._actor_names(), who=self._user(request)
        )
        if not isinstance(saved, forms.Saved):
            return self._form_page(
                request,
                dataclasses.replace(form, errors=saved),
                editing=editing,
                original=original,
                status="400 Bad Request",
            )
        if not saved.changed:
            return self._back(
                request, f"Nothing changed in runtime schedule {saved.schedule_id}.", default="/schedules"
            )
        return self._back(request, f"Saved runtime schedule {saved.schedule_id}.", default="/schedules")

    def _runtime_remove(self, request: _Request) -> _Response:
        store = self._writable_runtime()
        schedule = find_runtime(store, request.form.get("id", ""))
        if schedule is None:
            raise _HTTPError("404 Not Found", "No such runtime schedule.")
        was = f"was {schedule.expression} in {schedule.timezone}"
        self.cron.remove(schedule.actor_name, schedule.name, who=self._user(request), detail=was)
        return self._back(request, f"Removed runtime schedule {schedule.id}.", default="/schedules")

    def _form_page(
        self, request: _Request, form: forms.RuntimeForm, *, editing: bool, original: str = "", status: str = "200 OK"
    ) -> _Response:
        context = {"form": form, "editing": editing, "original": original, "actors": self._actor_names()}
        return self._page(request, "runtime_form.html", context, status=status)

    def _user(self, request: _Request) -> str:
        """Who the request acts as, as the audit records it."""
        who = self.access.user(request.environ)[:200]
        try:
            return check_who(who)
        except CronScheduleError:  # a proxy's REMOTE_USER of control characters
            return "dashboard"

    # -- lookups --------------------------------------------------------------

    @functools.cached_property
    def cron(self) -> Cron:
        """The operator service (service.py) on the dashboard's store: its
        Redis and runtime schedules, acting as the user of each request."""
        return Cron(
            store=self.control,
            runtime=self.runtime,
            declared=self.middleware.all_schedules,
            broker=lambda: self.broker,
            prefix=self.middleware.prefix,
            where=self.where,
        )

    def _writable_runtime(self) -> Any:
        if self.runtime is None or not hasattr(self.runtime, "add"):
            raise _HTTPError("404 Not Found", "This app has no runtime schedules.")
        return self.runtime

    def _actor_names(self) -> list[str]:
        return sorted(self.broker.get_declared_actors())

    def _find(self, schedule_id: str) -> tuple[BoundSchedule | None, str | None]:
        found = self.cron.find(schedule_id)
        return found, None if found is None else found.source

    def _target(self, request: _Request) -> Target:
        """What a form names: ``schedule`` (a schedule's id, as every button
        posts it) or ``actor`` (a whole actor, as the resume of an actor
        paused as a whole posts it; for a trigger, an actor with a single
        schedule)."""
        form = request.form
        resuming = request.path == "/resume"
        try:
            if "schedule" in form:
                return self.cron.target(form["schedule"], resuming=resuming)
            if "actor" in form and request.path == "/trigger":
                return self.cron.target(name=form["actor"])
            if "actor" in form:
                return self.cron.target(actor=form["actor"], resuming=resuming)
        except UnknownTarget as exc:
            raise _HTTPError("404 Not Found", f"{str(exc).capitalize()}.") from None
        except AmbiguousTarget as exc:
            raise _HTTPError("400 Bad Request", f"Refused: {exc}; choose one of them on the schedules page.") from None
        raise _HTTPError("400 Bad Request", "No schedule named.")

    # -- responses ------------------------------------------------------------

    def _page(self, request: _Request, name: str, context: dict[str, Any], *, status: str = "200 OK") -> _Response:
        template = self._environment().get_template(name)
        body = template.render(
            request=request,
            url=request.url,
            csrf_field=CSRF_FIELD,
            csrf=request.csrf,
            read_only=self.read_only,
            notice=request.notice,
            where=self.where,
            runtime=self.runtime is not None,
            here=_relative(request.path, request.query),
            **context,
        )
        response = _Response(status, body.encode())
        response.headers.append(("Content-Type", "text/html; charset=utf-8"))
        if request.notice:
            response.headers.append(("Set-Cookie", _cookie(NOTICE_COOKIE, "", request.base or "/", max_age=0)))
        return response

    def _environment(self) -> Any:
        return self._templates

    def _back(self, request: _Request, notice: str, *, default: str = "/") -> _Response:
        """A 303 to the page the form came from (only ever a page of ours)."""
        back = request.form.get("next", "")
        path, _, rest = back.partition("?")
        if path not in {p for _, p in self._routes} or back.startswith("//"):
            path, rest = default, ""
        response = self._redirect(request, path, dict(parse_qsl(rest)))
        # The notice travels in a cookie, not in the address: a link made
        # elsewhere cannot put words of its own on the dashboard's pages.
        response.headers.append(
            ("Set-Cookie", _cookie(NOTICE_COOKIE, quote(notice[:300], safe=""), request.base or "/"))
        )
        return response

    def _redirect(self, request: _Request, path: str, params: Mapping[str, str]) -> _Response:
        response = _Response("303 See Other", b"")
        response.headers.append(("Location", request.url(path, params)))
        return response

    def _json(self, status: str, document: Any) -> _Response:
        response = _Response(status, json.dumps(document).encode())
        response.headers.append(("Content-Type", "application/json"))
        return response

    def _plain(self, status: str, text: str) -> _Response:
        response = _Response(status, text.encode())
        response.headers.append(("Content-Type", "text/plain; charset=utf-8"))
        return response

    def _static(self, name: str) -> _Response:
        extension = os.path.splitext(name)[1]
        if "/" in name or name.startswith(".") or extension not in _STATIC_TYPES:
            return self._plain("404 Not Found", "Not found.")
        resource = importlib.resources.files(__package__).joinpath("static").joinpath(name)
        if not resource.is_file():
            return self._plain("404 Not Found", "Not found.")
        response = _Response("200 OK", resource.read_bytes())
        response.headers.append(("Content-Type", _STATIC_TYPES[extension]))
        return response


def _templates() -> Any:
    try:
        import jinja2
    except ImportError:
        from ..errors import CronConfigurationError

        raise CronConfigurationError(
            "the cron dashboard needs Jinja2: pip install 'dramatiq-cron-middleware[web]'"
        ) from None
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        when=when, short_when=short_when, iso=iso, span=span, redact=redact, quote=quote, json_text=_json_text
    )
    # The tick outcomes that enqueued a message: the row says "last
    # enqueued", apart from the health's "last run".
    enqueued = {str(o) for o in (Outcome.FIRED, Outcome.CAUGHT_UP, Outcome.TRIGGERED, Outcome.BACKFILLED)}
    environment.globals.update(colours=OUTCOME_COLOURS, run_colours=RUN_COLOURS, enqueued=enqueued)
    return environment


def _read_form(environ: WSGIEnviron) -> dict[str, str]:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > _MAX_BODY:
        raise _HTTPError("413 Content Too Large", "The form is too large.")
    kind = str(environ.get("CONTENT_TYPE") or "application/x-www-form-urlencoded").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise _HTTPError(
            "415 Unsupported Media Type", "Forms are sent URL-encoded, as the dashboard's pages send them."
        )
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise _HTTPError("400 Bad Request", "The form is not UTF-8.") from None


def _relative(path: str, params: Mapping[str, str]) -> str:
    """A path inside the dashboard with its query, as forms carry it back."""
    return path + ("?" + urlencode(params) if params else "")


def _json_text(value: Any) -> str:
    """A value as JSON text, escaped once by the template (``tojson`` is
    for scripts: its ``\\u003c`` would show as such on the page)."""
    return json.dumps(value, sort_keys=True, default=str)


def _stream_id(value: str) -> bool:
    ms, _, seq = value.partition("-")
    return ms.isdigit() and seq.isdigit()


def _cookie(name: str, value: str, path: str, *, max_age: int | None = None) -> str:
    attributes = f"{name}={value}; Path={path}; SameSite=Strict; HttpOnly"
    return attributes + ("" if max_age is None else f"; Max-Age={max_age}")
