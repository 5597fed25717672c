"""The dashboard's request cycle in parts: the request and the response as
values, the errors a handler raises for a page, forms read from the body,
cookies, the plain, JSON, redirect and static responses, and the templates.

Nothing here knows the scheduler: :mod:`.app` routes, :mod:`.actions` acts,
:mod:`.pages` and :mod:`.health_pages` read.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from ..errors import CronConfigurationError
from ..schedules.outcome import Outcome
from ..times import iso, short_when, span, when
from .chart import OUTCOME_COLOURS, RUN_COLOURS

__all__ = [
    "NOTICE_COOKIE",
    "SECURITY_HEADERS",
    "HTTPError",
    "Request",
    "Response",
    "StartResponse",
    "WSGIEnviron",
    "cookie",
    "json_response",
    "plain",
    "read_form",
    "redirect",
    "relative",
    "static",
    "stream_id",
    "templates",
]

StartResponse = Callable[..., Any]
WSGIEnviron = dict[str, Any]

# The cookie carrying the outcome of an action to the page it redirects to.
NOTICE_COOKIE = "cron_notice"
# A form is a handful of short fields; anything bigger is not ours.
MAX_BODY = 64 * 1024
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
SECURITY_HEADERS = [
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


class HTTPError(Exception):
    """A request the dashboard answers with an error page of this status."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass
class Request:
    """One request, as the handlers read it."""

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
class Response:
    """One answer: its status, body and headers."""

    status: str
    body: bytes
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def plain(status: str, text: str) -> Response:
    """A plain-text answer."""
    response = Response(status, text.encode())
    response.headers.append(("Content-Type", "text/plain; charset=utf-8"))
    return response


def json_response(status: str, document: Any) -> Response:
    """A JSON answer."""
    response = Response(status, json.dumps(document).encode())
    response.headers.append(("Content-Type", "application/json"))
    return response


def redirect(request: Request, path: str, params: Mapping[str, str]) -> Response:
    """A 303 to a page of the dashboard."""
    response = Response("303 See Other", b"")
    response.headers.append(("Location", request.url(path, params)))
    return response


def static(name: str) -> Response:
    """A file of ``static/`` (a known kind, no path), or 404."""
    extension = os.path.splitext(name)[1]
    if "/" in name or name.startswith(".") or extension not in STATIC_TYPES:
        return plain("404 Not Found", "Not found.")
    resource = importlib.resources.files(__package__).joinpath("static").joinpath(name)
    if not resource.is_file():
        return plain("404 Not Found", "Not found.")
    response = Response("200 OK", resource.read_bytes())
    response.headers.append(("Content-Type", STATIC_TYPES[extension]))
    return response


def templates() -> Any:
    """The pages' Jinja2 environment (autoescaping, strict).

    Raises:
      CronConfigurationError: Jinja2 is not installed (with the install hint).
    """
    try:
        import jinja2
    except ImportError:
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
    environment.filters.update(when=when, short_when=short_when, iso=iso, span=span, quote=quote, json_text=json_text)
    # The tick outcomes that enqueued a message: the row says "last
    # enqueued", apart from the health's "last run".
    enqueued = {str(o) for o in (Outcome.FIRED, Outcome.CAUGHT_UP, Outcome.TRIGGERED, Outcome.BACKFILLED)}
    environment.globals.update(colours=OUTCOME_COLOURS, run_colours=RUN_COLOURS, enqueued=enqueued)
    return environment


def read_form(environ: WSGIEnviron) -> dict[str, str]:
    """A POST's URL-encoded form (at most 64 KiB, UTF-8).

    Raises:
      HTTPError: 413, 415 or 400 for a body that is no such form.
    """
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        raise HTTPError("413 Content Too Large", "The form is too large.")
    kind = str(environ.get("CONTENT_TYPE") or "application/x-www-form-urlencoded").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPError("415 Unsupported Media Type", "Forms are sent URL-encoded, as the dashboard's pages send them.")
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise HTTPError("400 Bad Request", "The form is not UTF-8.") from None


def relative(path: str, params: Mapping[str, str]) -> str:
    """A path inside the dashboard with its query, as forms carry it back."""
    return path + ("?" + urlencode(params) if params else "")


def json_text(value: Any) -> str:
    """A value as JSON text, escaped once by the template (``tojson`` is
    for scripts: its ``\\u003c`` would show as such on the page)."""
    return json.dumps(value, sort_keys=True, default=str)


def stream_id(value: str) -> bool:
    """Whether ``value`` is a history cursor (a stream entry id)."""
    ms, _, seq = value.partition("-")
    return ms.isdigit() and seq.isdigit()


def cookie(name: str, value: str, path: str, *, max_age: int | None = None) -> str:
    """A ``Set-Cookie`` value: strict same-site, not for scripts."""
    attributes = f"{name}={value}; Path={path}; SameSite=Strict; HttpOnly"
    return attributes + ("" if max_age is None else f"; Max-Age={max_age}")
