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
import socket
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

__all__ = ["DEFAULT_BIND", "LOG_FORMAT", "Unsafe", "configure_logging", "is_loopback", "parse_bind", "start"]

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
