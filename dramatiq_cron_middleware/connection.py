"""The scheduler's own Redis connections, with timeouts bounded by the lease.

Whatever the user hands in (a URL, a client, or nothing so that the
broker's client is used), lease traffic must fail fast: a default redis-py
client can take about a minute to give up on a dead server, far longer than
a lease.  So the scheduler never uses the given client directly; it builds
its own pools from the same connection parameters with short timeouts and
at most one retry.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import CronConfigurationError

__all__ = ["ENV_URL", "redact", "scheduler_clients", "describe"]

#: The environment variable read when ``CronMiddleware(redis=...)`` is omitted.
ENV_URL = "DRAMATIQ_CRON_REDIS_URL"

# Connection parameters carried over from a user's client.  Everything else
# (timeouts, retries, response decoding) is the scheduler's own choice.
_CARRIED = {
    "host",
    "port",
    "db",
    "username",
    "password",
    "path",
    "credential_provider",
    "client_name",
    "protocol",
    "socket_keepalive",
    "socket_keepalive_options",
}

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^@/\s]*)@")


def redact(text: str) -> str:
    """Replace the user-info part of every URL in ``text`` with ``***``."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", text)


def describe(client: redis.Redis) -> str:
    """A credential-free description of where a client connects."""
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}"
    scheme = "rediss" if "ssl" in client.connection_pool.connection_class.__name__.lower() else "redis"
    return f"{scheme}://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def scheduler_clients(source: Any, *, op_timeout_ms: int, block_timeout_ms: int) -> tuple[redis.Redis, redis.Redis]:
    """Build the scheduler's two clients from a URL or a redis-py client.

    Returns ``(commands, blocking)``: ``commands`` times out after
    ``op_timeout_ms`` and retries at most once; ``blocking`` is for the
    follower's ``BLPOP`` and allows ``block_timeout_ms`` on top of that.
    """
    if isinstance(source, str):
        url = source
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise CronConfigurationError(
                f"CronMiddleware: redis URL must start with redis://, rediss:// or unix://, got {redact(url)!r}"
            )
        try:
            template = redis.Redis.from_url(url)
        except ValueError as exc:
            raise CronConfigurationError(f"CronMiddleware: invalid redis URL {redact(url)!r}: {redact(str(exc))}") from None
    elif isinstance(source, redis.Redis):
        template = source
    else:
        raise CronConfigurationError(
            "CronMiddleware: redis= must be a redis:// URL or a redis.Redis client, "
            f"got {type(source).__name__}"
        )
    return (
        _derive(template, timeout_ms=op_timeout_ms),
        _derive(template, timeout_ms=op_timeout_ms + block_timeout_ms),
    )


def _derive(template: redis.Redis, *, timeout_ms: int) -> redis.Redis:
    pool = template.connection_pool
    kwargs = {
        key: value
        for key, value in pool.connection_kwargs.items()
        if key in _CARRIED or (key.startswith("ssl") and key != "ssl")
    }
    timeout = timeout_ms / 1000
    kwargs.update(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        decode_responses=True,
        health_check_interval=0,
    )
    new_pool = redis.ConnectionPool(connection_class=pool.connection_class, max_connections=8, **kwargs)
    return redis.Redis(connection_pool=new_pool)


def url_from_environment() -> str | None:
    """The URL in ``DRAMATIQ_CRON_REDIS_URL``, or None."""
    value = os.environ.get(ENV_URL, "").strip()
    return value or None


def unparse(url: str) -> str:
    """``url`` without credentials (for log lines)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
