"""Calling a WSGI application the way a server would, in-process."""

from __future__ import annotations

import base64
import io
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


def form_fields(page: str, form_id: str) -> dict[str, str]:
    """What a browser would post for the form ``form_id`` of ``page`` left
    as it is: each input's value, each select's selected option, each
    textarea's text (less the one line break that follows its tag, which
    HTML drops)."""
    from html.parser import HTMLParser

    class _Form(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.inside = False
            self.fields: dict[str, str] = {}
            self.select: str | None = None
            self.textarea: str | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = {k: v or "" for k, v in attrs}
            if tag == "form":
                self.inside = a.get("id") == form_id
            elif not self.inside or "name" not in a:
                if tag == "option" and self.inside and self.select is not None and "selected" in a:
                    self.fields[self.select] = a.get("value", "")
            elif tag == "input":
                self.fields[a["name"]] = a.get("value", "")
            elif tag == "select":
                self.select = a["name"]
                self.fields.setdefault(a["name"], "")
            elif tag == "textarea":
                self.textarea = a["name"]
                self.fields[a["name"]] = ""

        def handle_endtag(self, tag: str) -> None:
            if tag == "form":
                self.inside = False
            elif tag == "select":
                self.select = None
            elif tag == "textarea" and self.textarea is not None:
                text = self.fields[self.textarea]
                self.fields[self.textarea] = text[1:] if text.startswith("\n") else text
                self.textarea = None

        def handle_data(self, data: str) -> None:
            if self.textarea is not None:
                self.fields[self.textarea] += data

    parser = _Form()
    parser.feed(page)
    return parser.fields
