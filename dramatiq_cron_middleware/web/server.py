"""The standalone dashboard server behind ``dramatiq-cron web``: the
standard library's WSGI server, one thread per request.

It binds to the loopback address unless told otherwise, and refuses a
non-loopback address without authentication unless the caller insists
(``insecure=True``): a dashboard that can pause every schedule should not
be one typo away from the network.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

__all__ = ["DEFAULT_BIND", "LOG_FORMAT", "Unsafe", "configure_logging", "is_loopback", "parse_bind", "serve", "start"]

#: Where ``dramatiq-cron web`` listens unless ``--bind`` says otherwise.
DEFAULT_BIND = "127.0.0.1:8080"

#: The format of the lines ``dramatiq-cron web`` logs: the dramatiq worker's.
LOG_FORMAT = "[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] [%(levelname)s] %(message)s"

_logger = logging.getLogger(__name__)


def configure_logging() -> bool:
    """Log at INFO to stderr, in the dramatiq worker's format, unless the
    app already configured logging (its root logger has a handler): the
    audit lines of every action then reach the server's log.  Returns
    whether it configured anything."""
    root = logging.getLogger()
    if root.handlers:
        return False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
    return True


class Unsafe(ValueError):
    """A bind that would expose the dashboard without authentication."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _Handler(WSGIRequestHandler):
    """Logs requests through :mod:`logging` (at DEBUG) instead of stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        _logger.debug("%s %s", self.address_string(), format % args)


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6, ``:8080`` for loopback)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, DEFAULT_BIND.rpartition(":")[2]
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--bind wants HOST:PORT, got {value!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def start(app: Any, host: str, port: int, *, authenticated: bool, insecure: bool = False) -> WSGIServer:
    """Bind a threading WSGI server for ``app`` and serve it from a daemon
    thread; returns the server (``server.server_port`` is the real port,
    ``server.shutdown()`` stops it).

    Raises:
      Unsafe: ``host`` is not a loopback address, there is no
        authentication, and ``insecure`` is not set.
    """
    if not is_loopback(host) and not authenticated and not insecure:
        raise Unsafe(
            f"refusing to serve the dashboard on {host} without --auth or --token: anyone who reaches it could "
            "pause or trigger every schedule (pass --insecure-bind if a proxy in front authenticates)"
        )
    server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
    server = make_server(host, port, app, server_class=server_class, handler_class=_Handler)
    threading.Thread(target=server.serve_forever, name="cron-dashboard", daemon=True).start()
    return server


def serve(broker: Any, *, bind: str, auth: str | None, token: str | None, **options: Any) -> None:
    """``dramatiq-cron web``: serve the dashboard of ``broker``'s app on
    ``bind`` until Ctrl+C.  ``auth`` (``USER:PASSWORD``) and ``token``
    default to ``$DRAMATIQ_CRON_WEB_AUTH`` and ``$DRAMATIQ_CRON_WEB_TOKEN``;
    ``options``: ``read_only``, ``insecure`` (a non-loopback bind without
    credentials), ``allowed_hosts`` (names besides the loopback ones and
    the bound address).

    Raises:
      ValueError: naming what is wrong with the arguments, or why it cannot
        listen.
    """
    from .app import CronDashboard
    from .security import LOOPBACK_HOSTS

    host, port = parse_bind(bind)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise ValueError(
            f"--bind {bind!r}: no such host {host!r} here; give HOST:PORT, for example 127.0.0.1:8080"
        ) from None
    auth_text, auth_from = _credential(auth, "--auth", "DRAMATIQ_CRON_WEB_AUTH", "USER:PASSWORD")
    token, _ = _credential(token, "--token", "DRAMATIQ_CRON_WEB_TOKEN", "a token")
    user, sep, password = (auth_text or "").partition(":")
    if auth_text is not None and not (sep and user and password):
        raise ValueError(f"{auth_from} wants USER:PASSWORD")
    # Answer for this machine's loopback names, the bound address, and the
    # names the operator reaches it by.
    hosts = [*LOOPBACK_HOSTS, *options.get("allowed_hosts", ())]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        hosts.append(f"[{host}]" if ":" in host else host)
    authenticated = bool(auth_text or token)
    read_only = bool(options.get("read_only"))
    dashboard = CronDashboard(
        broker,
        prefix="",
        read_only=read_only,
        auth=(user, password) if auth_text is not None else None,
        token=token,
        # start() below refuses a non-loopback bind without credentials
        # unless insecure says a proxy in front authenticates.
        unauthenticated=not authenticated,
        allowed_hosts=hosts,
    )
    try:
        server = start(dashboard, host, port, authenticated=authenticated, insecure=bool(options.get("insecure")))
    except OSError as exc:
        raise ValueError(f"cannot listen on {bind}: {exc.strerror or exc}") from None
    # The app is loaded: if it configured logging, its own setup stands.
    configure_logging()
    shown = f"[{host}]" if ":" in host else host
    print(
        f"Serving the cron dashboard{' (read-only)' if read_only else ''} on http://{shown}:{server.server_port}/ "
        f"for the hosts {', '.join(hosts)} (Ctrl+C stops it)",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        dashboard.middleware.stop()  # closes the clients it opened, the service's among them


def _credential(flag_value: str | None, flag: str, variable: str, wanted: str) -> tuple[str | None, str]:
    """A credential from its flag, else from its environment variable
    (which ``ps`` does not show); returns it and where it came from.  An
    empty one is refused: it would silently serve without it."""
    value, source = (flag_value, flag) if flag_value is not None else (os.environ.get(variable), variable)
    if value is not None and not value.strip():
        raise ValueError(f"{source} is empty: give {wanted}, or leave it out")
    return value, source
