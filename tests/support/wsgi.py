"""Calling a WSGI application the way a server would, in-process."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode, urlsplit
from wsgiref.util import setup_testing_defaults


@dataclass
class Reply:
    """What the application answered."""

    status: int
    headers: list[tuple[str, str]]
    text: str

    def header(self, name: str) -> str | None:
        """The first header of that name."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass
class Browser:
    """Keeps cookies between requests, like a browser would."""

    app: Callable[..., Iterable[bytes]]
    cookies: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def request(
        self,
        method: str,
        url: str,
        *,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One request; cookies the answer sets are kept."""
        parts = urlsplit(url)
        environ: dict[str, Any] = {}
        setup_testing_defaults(environ)
        body = urlencode(form or {}).encode()
        environ.update(
            REQUEST_METHOD=method,
            PATH_INFO=parts.path,
            QUERY_STRING=parts.query,
            CONTENT_LENGTH=str(len(body)),
            CONTENT_TYPE="application/x-www-form-urlencoded",
            HTTP_HOST="127.0.0.1",
        )
        environ["wsgi.input"] = io.BytesIO(body)
        if self.cookies:
            environ["HTTP_COOKIE"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        for name, value in {**self.headers, **(headers or {})}.items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        captured: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            captured["status"], captured["headers"] = status, response_headers

        text = b"".join(self.app(environ, start_response)).decode()
        for name, value in captured["headers"]:
            if name.lower() == "set-cookie":
                jar: SimpleCookie = SimpleCookie()
                jar.load(value)
                self.cookies.update({k: m.value for k, m in jar.items()})
        return Reply(status=int(captured["status"].split()[0]), headers=captured["headers"], text=text)

    def get(self, url: str, **kwargs: Any) -> Reply:
        """A GET."""
        return self.request("GET", url, **kwargs)

    def post(self, url: str, form: Mapping[str, str], **kwargs: Any) -> Reply:
        """A POST of a form."""
        return self.request("POST", url, form=form, **kwargs)


def basic(user: str, password: str) -> dict[str, str]:
    """The Authorization header of HTTP basic auth."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def csrf_of(page: str) -> str:
    """The CSRF value a dashboard page's forms carry."""
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)
