"""Who may look and who may act: the hosts the dashboard answers for,
optional basic auth or a bearer token, and the CSRF check every
state-changing POST must pass.

The ``Host`` allowlist stops DNS rebinding: a page on ``evil.example``
whose name is re-pointed at the dashboard's address makes the browser send
``Host: evil.example``, treat the dashboard as that page's own origin, and
let it read the CSRF value; answering 400 to every host that is not
allowed leaves it nothing to read.

CSRF is the double-submit pattern: a random value in a ``SameSite=Strict``
cookie, repeated in a hidden field of every form.  A page of another site
can make the browser send the cookie, but cannot read it to put the same
value in the form.  It needs no server-side state and no shared secret, so
several server processes behind one address agree without configuration.
A POST whose ``Origin`` names another host is refused as well.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from collections.abc import Mapping, Sequence
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import CronConfigurationError

__all__ = [
    "check_guard",
    "Access",
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "LOOPBACK_HOSTS",
    "TOKEN_COOKIE",
    "HostAllowlist",
    "cookies",
    "csrf_ok",
    "new_csrf_value",
    "same_origin",
]

#: The cookie holding the CSRF value, and the form field that repeats it.
CSRF_COOKIE = "cron_csrf"
CSRF_FIELD = "csrf"
#: The cookie a ``?token=`` visit stores, so links keep working.
TOKEN_COOKIE = "cron_token"


def cookies(environ: Mapping[str, Any]) -> dict[str, str]:
    """The request's cookies by name."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(environ.get("HTTP_COOKIE", ""))
    except Exception:  # a malformed header from another app on the host
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def new_csrf_value() -> str:
    """A fresh unguessable CSRF value."""
    return secrets.token_urlsafe(24)


def csrf_ok(cookie_value: str | None, form_value: str | None) -> bool:
    """Whether the form repeats the cookie's CSRF value."""
    if not cookie_value or not form_value:
        return False
    return hmac.compare_digest(cookie_value.encode(), form_value.encode())


#: The hosts a dashboard answers for unless told otherwise: this machine's
#: loopback names and addresses, on any port.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

# A host name or an IPv4 address, or an IPv6 address in brackets, and an
# optional port (the grammar Django checks Host headers against).
_HOST = re.compile(r"^([a-z0-9.-]+|\[[a-f0-9]*:[a-f0-9.:]+\])(:\d+)?$")


class HostAllowlist:
    """The ``Host`` names a dashboard answers for, as Django's
    ``ALLOWED_HOSTS``: ``"cron.example.com"`` that name, ``".example.com"``
    that domain and its subdomains, ``"*"`` any host; ports are ignored and
    case does not matter.

    Parameters:
      patterns: The allowed names.  Defaults to :data:`LOOPBACK_HOSTS`.
    """

    def __init__(self, patterns: Sequence[str] = LOOPBACK_HOSTS) -> None:
        self.patterns = tuple(p.lower().rstrip(".") for p in patterns)

    def host_of(self, environ: Mapping[str, Any]) -> str | None:
        """The request's ``Host`` (or, without one, the server's name and
        port), or None when it is malformed or not allowed."""
        host = str(environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME', '')}:{environ.get('SERVER_PORT', '')}")
        return host if self.allows(host) else None

    def allows(self, host: str) -> bool:
        """Whether a ``Host`` value (with or without a port) is allowed."""
        match = _HOST.match(host.lower())
        if match is None:
            return False
        name = match.group(1).rstrip(".")
        return any(
            pattern == "*"
            or name == pattern
            or (pattern.startswith(".") and (name.endswith(pattern) or name == pattern[1:]))
            for pattern in self.patterns
        )


def same_origin(environ: Mapping[str, Any], host: str) -> bool:
    """False when the browser says the request comes from another origin
    than ``host``, the request's own (allowed) ``Host``.

    Browsers send ``Origin`` on every cross-site POST; a request without it
    (curl, an old browser) is judged by the CSRF token alone.
    """
    origin = environ.get("HTTP_ORIGIN")
    if not origin:
        return True
    if origin == "null":  # a sandboxed frame or a privacy-stripped origin
        return False
    return bool(urlsplit(origin).netloc.lower() == host.lower())


class Access:
    """Optional authentication of every request.

    Parameters:
      auth: ``(user, password)`` for HTTP basic auth.  Defaults to None.
      token: A bearer token: ``Authorization: Bearer <token>``, or a visit
        to any page with ``?token=<token>``, which stores it in a cookie.
        Defaults to None.  With neither, every request is let through (the
        host application is expected to guard the mount).
    """

    def __init__(self, *, auth: tuple[str, str] | None = None, token: str | None = None) -> None:
        self.auth = auth
        self.token = token

    @property
    def enabled(self) -> bool:
        """Whether any credential is required."""
        return self.auth is not None or self.token is not None

    def allows(self, environ: Mapping[str, Any], query_token: str | None) -> bool:
        """Whether the request carries a valid credential."""
        if not self.enabled:
            return True
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.partition(" ")
        if self.auth is not None and scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            # Both compared, always, so the time taken tells nothing.
            same_user = hmac.compare_digest(user.encode(), self.auth[0].encode())
            same_password = hmac.compare_digest(password.encode(), self.auth[1].encode())
            return same_user and same_password
        if self.token is not None:
            for candidate in (
                value.strip() if scheme.lower() == "bearer" else None,
                unquote(cookies(environ).get(TOKEN_COOKIE, "")),
                query_token,
            ):
                if candidate and hmac.compare_digest(candidate.encode(), self.token.encode()):
                    return True
        return False

    def user(self, environ: Mapping[str, Any]) -> str:
        """Who the request acts as, for the audit: the basic-auth user, or
        ``token`` for a bearer token, or the ``REMOTE_USER`` an
        authenticating server in front set, or ``dashboard``.  Only called
        on a request :meth:`allows` let through."""
        scheme = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")[0]
        if self.auth is not None and scheme.lower() == "basic":
            return self.auth[0]
        if self.token is not None:
            return "token"
        return str(environ.get("REMOTE_USER") or "dashboard")

    def challenge(self) -> str | None:
        """The ``WWW-Authenticate`` header for a refused request."""
        if self.auth is not None:
            return 'Basic realm="dramatiq-cron", charset="UTF-8"'
        return 'Bearer realm="dramatiq-cron"' if self.token is not None else None


def check_guard(
    *,
    auth: object,
    token: object,
    read_only: bool,
    unauthenticated: bool,
    allowed_hosts: Any,
) -> None:
    """Refuse, naming the argument, a dashboard's credentials or hosts
    that are malformed, contradict each other, or leave it unguarded.

    Raises:
      CronConfigurationError: with the argument and what was wrong.
    """
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
