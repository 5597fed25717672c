"""The dashboard's WSGI application: routing, the request cycle, and the
actions (pause, resume, trigger, runtime schedule forms).

Every page is rendered on the server and works with JavaScript off.  A
GET never changes anything; every change is a POST carrying the CSRF value
(see ``security.py``) and answered with a redirect, so reloading a page
never repeats an action.  Templates escape everything they print.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

import dramatiq
import redis
from dramatiq.logging import get_logger

from ..errors import CronConfigurationError, CronUnavailableError
from ..middleware import find_middleware
from ..monitoring.records import ScheduleHealth
from ..service import Cron
from ..status import Status, status_sets_json
from . import actions, health_pages, pages
from .chart import duration_chart
from .http import (
    NOTICE_COOKIE,
    SECURITY_HEADERS,
    HTTPError,
    Request,
    Response,
    StartResponse,
    WSGIEnviron,
    cookie,
    json_response,
    plain,
    read_form,
    redirect,
    relative,
    static,
    stream_id,
    templates,
)
from .security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    LOOPBACK_HOSTS,
    TOKEN_COOKIE,
    Access,
    HostAllowlist,
    check_guard,
    cookies,
    csrf_ok,
    new_csrf_value,
    same_origin,
)

__all__ = ["CronDashboard"]

Handler = Callable[["CronDashboard", Request], Response]


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
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.middleware = find_middleware(broker, needed_by="CronDashboard")
        check_guard(
            auth=auth, token=token, read_only=read_only, unauthenticated=unauthenticated, allowed_hosts=allowed_hosts
        )
        self.hosts = HostAllowlist(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts)
        self.broker = broker
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.read_only = read_only
        self.access = Access(auth=auth, token=token)
        self.refresh_ms = refresh_ms
        self.middleware.redis_source(broker)  # no Redis to be found: refused now
        self.health_cache = health_pages.ReportCache(
            lambda: health_pages.read_all(
                self.cron, self.middleware.all_schedules(), self.runtime_index, policy=self.middleware.health_policy
            )
        )
        # Built now, so a missing Jinja2 fails here with the install hint.
        self.templates = templates()

    @functools.cached_property
    def cron(self) -> Cron:
        """The operator service of the app's scheduler (``CronMiddleware.service``):
        its Redis and runtime schedules, as the command reads them, so the
        two cannot tell different stories."""
        return self.middleware.service

    @functools.cached_property
    def runtime_index(self) -> pages.RuntimeIndex:
        """The runtime ids in natural order, kept (see :class:`~.pages.RuntimeIndex`)."""
        return pages.RuntimeIndex(self.middleware.runtime)

    # -- WSGI -----------------------------------------------------------------

    def __call__(self, environ: WSGIEnviron, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request."""
        try:
            response = self._respond(environ)
        except Exception:  # a bug must not leak a traceback (or a URL) into a page
            self.logger.exception("The cron dashboard failed to answer %s.", environ.get("PATH_INFO", ""))
            response = plain("500 Internal Server Error", "Internal error; see the server's log.")
        headers = [*SECURITY_HEADERS, *response.headers, ("Content-Length", str(len(response.body)))]
        start_response(response.status, headers)
        return [b"" if environ.get("REQUEST_METHOD", "").upper() == "HEAD" else response.body]

    def _respond(self, environ: WSGIEnviron) -> Response:
        """The host, the mount, the credentials, then the request (or a token kept in a cookie)."""
        host = self.hosts.host_of(environ)
        if host is None:
            shown = str(environ.get("HTTP_HOST", ""))[:100]
            return plain("400 Bad Request", f"This dashboard does not answer for the host {shown!r} (allowed_hosts).")
        script = environ.get("SCRIPT_NAME", "").rstrip("/")
        path = environ.get("PATH_INFO", "") or "/"
        if self.prefix and (path == self.prefix or path.startswith(self.prefix + "/")):
            script, path = script + self.prefix, path[len(self.prefix) :] or "/"
        elif self.prefix and not script.endswith(self.prefix):
            return plain("404 Not Found", "Not found.")
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        if not self.access.allows(environ, query.get("token")):
            response = plain("401 Unauthorized", "Authentication required.")
            challenge = self.access.challenge()
            if challenge:
                response.headers.append(("WWW-Authenticate", challenge))
            return response
        if path.startswith("/static/"):
            return static(path[len("/static/") :])
        jar = cookies(environ)
        csrf = jar.get(CSRF_COOKIE) or ""
        new_csrf = len(csrf) < 16
        request = Request(
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
            response = redirect(request, path, {k: v for k, v in query.items() if k != "token"})
            response.headers.append(("Set-Cookie", cookie(TOKEN_COOKIE, quote(query["token"], safe=""), script or "/")))
            return response
        response = self._dispatch(request)
        if request.new_csrf:
            response.headers.append(("Set-Cookie", cookie(CSRF_COOKIE, request.csrf, script or "/")))
        return response

    def _dispatch(self, request: Request) -> Response:
        """The route's handler, its refusals and the store's failures as pages."""
        method = "GET" if request.method == "HEAD" else request.method
        handler = ROUTES.get((method, request.path))
        if handler is None:
            if self.known(request.path):
                return plain("405 Method Not Allowed", "Method not allowed.")
            return self._error(request, "404 Not Found", "The dashboard has no such page.")
        try:
            if method == "POST":
                self._check_post(request)
            return handler(self, request)
        except HTTPError as exc:
            return self._error(request, exc.status, exc.message)
        except (redis.ConnectionError, redis.TimeoutError, CronUnavailableError) as exc:
            message = f"Redis at {self.cron.where} cannot be reached ({type(exc).__name__})."
            return self._error(request, "503 Service Unavailable", message)
        except redis.RedisError as exc:  # refused by ACLs, out of memory...: say so, without the details
            self.logger.warning("The cron dashboard got a Redis error: %s", self.cron.redacted(str(exc)))
            message = f"Redis at {self.cron.where} refused the request ({type(exc).__name__}); see the server's log."
            return self._error(request, "502 Bad Gateway", message)
        except CronConfigurationError as exc:  # the service's words for a refusal (redacted)
            self.logger.warning("The cron dashboard could not act: %s", exc)
            message = f"Redis at {self.cron.where} refused the request; see the server's log."
            return self._error(request, "502 Bad Gateway", message)

    def _error(self, request: Request, status: str, message: str) -> Response:
        heading = "Not found" if status.startswith("404") else "Not done"
        return self.page(request, "error.html", {"message": message, "heading": heading}, status=status)

    def _check_post(self, request: Request) -> None:
        if self.read_only:
            raise HTTPError("403 Forbidden", "This dashboard is read-only: nothing can be changed from it.")
        if not same_origin(request.environ, request.host):
            raise HTTPError("403 Forbidden", "Refused: the form was sent from another site.")
        request.form = read_form(request.environ)
        # The cookie was missing when new_csrf is set: no form can match it.
        if request.new_csrf or not csrf_ok(request.csrf, request.form.get(CSRF_FIELD)):
            raise HTTPError(
                "403 Forbidden", "Refused: the form's security token is missing or stale. Reload the page and retry."
            )

    # -- pages ----------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        """``/``: the leader, the candidates, Redis and the health counts."""
        context: dict[str, Any] = {"refresh_ms": self.refresh_ms, "lock_ttl": self.middleware.lock_ttl}
        try:
            context["status"] = self.status()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            declared = len(self.middleware.all_schedules())
            context.update(status=None, error=type(exc).__name__, declared=declared)
        return self.page(request, "overview.html", context)

    def status(self) -> Status:
        """The status, with the kept health of every schedule (read first:
        its age is never negative)."""
        health = self.health_cache.get()
        return self.cron.status(self.middleware, declares=lambda actor: actor in self.broker.actors, health=health)

    def schedules(self, request: Request) -> Response:
        """``/schedules``: searched, filtered, one page; the declared ones alone when Redis is down."""
        filters = pages.Filters.parse(request.query)
        code = self.middleware.all_schedules()
        problems: list[ScheduleHealth] = []
        healths: dict[str, ScheduleHealth] = {}
        try:
            if filters.health != "all":
                view = health_pages.filtered_view(self.cron, self.health_cache.get(), filters)
            else:
                view = pages.schedules_view(self.cron, code, self.runtime_index, filters)
            problems = self.health_cache.get().problems()
            rows = [row.schedule for row in view.rows]
            healths = health_pages.health_of(self.cron, rows, policy=self.middleware.health_policy)
        except (redis.ConnectionError, redis.TimeoutError, CronUnavailableError) as exc:
            # What the app declares is known without Redis: list it, and
            # say that its state is not.
            error = f"Redis at {self.cron.where} cannot be reached ({type(exc).__name__})"
            view = pages.declared_view(code, filters, now_ms=int(time.time() * 1000), error=error)
        context = {
            "view": view,
            "page_sizes": pages.PAGE_SIZES,
            "health_filters": pages.HEALTH_FILTERS,
            "problems": problems,
            "healths": healths,
        }
        return self.page(request, "schedules.html", context)

    def next_to_run(self, request: Request) -> Response:
        """``/next``: the schedules that fire soonest."""
        now, runs = pages.next_to_run(self.cron, self.middleware.all_schedules(), self.runtime_index)
        return self.page(request, "next.html", {"runs": runs, "now_ms": now})

    def history(self, request: Request) -> Response:
        """``/schedule?id=``: a schedule's history (paged by ``before``), runs and charts."""
        schedule_id = request.query.get("id", "")
        schedule = self.cron.find(schedule_id)
        if schedule is None and not schedule_id:
            raise HTTPError("404 Not Found", "No schedule named.")
        before = request.query.get("before") or None
        if before is not None and not stream_id(before):
            raise HTTPError("400 Bad Request", "Bad history cursor.")
        source = None if schedule is None else schedule.source
        view = pages.history_view(self.cron, schedule_id, schedule, source, before=before)
        if schedule is None and not view.rows and before is None:
            # Neither declared nor stored, and nothing recorded: a wrong id.
            raise HTTPError("404 Not Found", f"No schedule {schedule_id} is declared, stored or recorded.")
        runs = health_pages.schedule_runs(self.cron, schedule_id, schedule, policy=self.middleware.health_policy)
        context = {"view": view, "runs": runs, "runs_chart": duration_chart(runs.runs)}
        return self.page(request, "history.html", context)

    def health(self, request: Request) -> Response:
        """``/health``, for probes: the JSON of ``dramatiq-cron check
        --json``, answered 200, or 503 when a schedule is ``failing`` or
        ``missed`` (Nagios critical) or Redis cannot be reached (then the
        body is ``{"error": ...}``).  ``late`` and ``running_long`` (Nagios
        warning) answer 200: a probe that restarts or pages on them would
        act on a backed-up queue; ``dramatiq-cron check`` exits 1 for them.
        The report is the dashboard's kept one (see ``ReportCache``)."""
        try:
            status = self.status()
        except redis.RedisError as exc:
            where = self.cron.where
            error = f"Redis at {where} cannot be reached or refused the request ({type(exc).__name__})."
            return json_response("503 Service Unavailable", {"error": error})
        report = status.health.report
        document = {**report.to_json(), **status_sets_json(status)}
        return json_response("503 Service Unavailable" if report.exit_code >= 2 else "200 OK", document)

    # -- what the handlers share ------------------------------------------------

    def known(self, path: str) -> bool:
        """Whether ``path`` is a page of the dashboard."""
        return path in PATHS

    def actor_names(self) -> list[str]:
        """The app's declared actors, sorted (the form's choices)."""
        return sorted(self.broker.get_declared_actors())

    def page(self, request: Request, name: str, context: dict[str, Any], *, status: str = "200 OK") -> Response:
        """A template rendered for ``request`` (the notice shown once)."""
        body = self.templates.get_template(name).render(
            request=request,
            url=request.url,
            csrf_field=CSRF_FIELD,
            csrf=request.csrf,
            read_only=self.read_only,
            notice=request.notice,
            where=self.cron.where,
            here=relative(request.path, request.query),
            **context,
        )
        response = Response(status, body.encode())
        response.headers.append(("Content-Type", "text/html; charset=utf-8"))
        if request.notice:
            response.headers.append(("Set-Cookie", cookie(NOTICE_COOKIE, "", request.base or "/", max_age=0)))
        return response

    def back(self, request: Request, notice: str, *, default: str = "/") -> Response:
        """A 303 to the page the form came from (only ever a page of ours)."""
        back = request.form.get("next", "")
        path, _, rest = back.partition("?")
        if not self.known(path) or back.startswith("//"):
            path, rest = default, ""
        response = redirect(request, path, dict(parse_qsl(rest)))
        # The notice travels in a cookie, not in the address: a link made
        # elsewhere cannot put words of its own on the dashboard's pages.
        kept = cookie(NOTICE_COOKIE, quote(notice[:300], safe=""), request.base or "/")
        response.headers.append(("Set-Cookie", kept))
        return response


#: The routing table: (method, path) -> handler.
ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/"): CronDashboard.overview,
    ("GET", "/schedules"): CronDashboard.schedules,
    ("GET", "/schedule"): CronDashboard.history,
    ("GET", "/next"): CronDashboard.next_to_run,
    ("POST", "/pause"): actions.pause,
    ("POST", "/resume"): actions.pause,
    ("GET", "/trigger"): actions.confirm,
    ("POST", "/trigger"): actions.trigger,
    ("GET", "/runtime/new"): actions.runtime_form,
    ("POST", "/runtime/new"): actions.runtime_save,
    ("GET", "/runtime/edit"): actions.runtime_form,
    ("POST", "/runtime/edit"): actions.runtime_save,
    ("GET", "/runtime/remove"): actions.confirm,
    ("POST", "/runtime/remove"): actions.runtime_remove,
    ("GET", "/health"): CronDashboard.health,
}
PATHS = frozenset(path for _, path in ROUTES)
