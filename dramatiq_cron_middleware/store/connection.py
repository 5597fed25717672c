"""The scheduler's own Redis connections, with timeouts bounded by the lease.

Whatever the user hands in (a URL, a client, or nothing so that the
broker's client is used), lease traffic must fail fast: a default redis-py
client can take about a minute to give up on a dead server, far longer than
a lease.  So the scheduler never uses the given client directly; it builds
its own pools from the same connection parameters with short timeouts and
at most one retry.

redis-py 8 speaks RESP3 by default, and a RESP3 pool follows the server's
maintenance notifications: on a managed Redis an announced maintenance
relaxes every connection's socket timeout to 10-20 s, which would blind the
lease's failure detection for as long.  The scheduler's pools opt out
(where the installed redis-py has them), keeping the protocol the user's
client speaks.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import threading
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import redis
from dramatiq.logging import get_logger
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection, SentinelManagedSSLConnection

from ..errors import CronConfigurationError
from .codes import read_only
from .timing import Timing

_MaintConfig: Any
try:  # redis-py 7 and later
    from redis.maint_notifications import MaintNotificationsConfig as _MaintConfig
except ImportError:  # pragma: no cover - redis-py 5 and 6 relax nothing
    _MaintConfig = None

__all__ = [
    "CLUSTER_SCHEME",
    "ENV_URL",
    "SENTINEL_SCHEME",
    "Connections",
    "MasterChanged",
    "close_clients",
    "dedicated_connection",
    "describe",
    "node_client",
    "pool_for",
    "presence_client",
    "credentials_refused",
    "redact",
    "refusal",
    "same_server",
    "scheduler_clients",
    "scripting_missing",
    "sentinels_of",
    "unrelaxed",
]

#: The URL scheme of a Redis Cluster: ``redis+cluster://[user:password@]host:port[,host:port...]``
#: (any reachable nodes; the rest of the cluster is discovered).
CLUSTER_SCHEME = "redis+cluster"

#: The URL scheme of a Sentinel-managed master:
#: ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``.
SENTINEL_SCHEME = "redis+sentinel"


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

# Everything between a scheme and the last ``@`` on the same line, without
# crossing into another URL, is taken for user-info: a password may contain
# ``/``, ``?``, ``#``, spaces and ``@``, and hiding a little too much beats
# showing a password.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>(?:(?!://)[^\n])*)@")


def redact(text: str) -> str:
    """Replace the user-info part of every URL in ``text`` with ``***``,
    whatever characters it contains."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", text)


def credentials_refused(exc: BaseException, where: str) -> str | None:
    """One sentence when ``exc`` is Redis refusing the connection's
    credentials (none given where a password is required, or a wrong one),
    else None.  Never shows the password."""
    text = str(exc)
    if not isinstance(exc, (redis.AuthenticationError, redis.ResponseError)) and "NOAUTH" not in text:
        return None
    if "NOAUTH" in text or "must be called with the client already authenticated" in text:
        # (The URL goes last: redact() hides up to the last '@' after it.)
        return (
            "Redis requires a password and none was given: put it in the URL as ':PASSWORD@' (or "
            f"'USER:PASSWORD@') before the host, percent-encoded (Redis at {where})"
        )
    if isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in text or "invalid password" in text:
        return (
            f"Redis at {where} refused the user name or password in the URL (a wrong password, or the user is disabled)"
        )
    return None


#: Replies by which a reachable Redis refuses a command for a while (an
#: operational state, not a bug): writes without enough replicas, memory
#: full under ``noeviction``, a failing snapshot, a cluster slot being
#: migrated or a cluster or replica link down, a dataset being loaded.
_REFUSALS = ("NOREPLICAS", "OOM", "MISCONF", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING")
# What Redis appends to an error raised inside a script.
_SCRIPT_SUFFIX = re.compile(r"\s*script: \w+, on @user_script:\d+\.?$")
# How Redis 6.2 wraps an error a script's command met: "Error running
# script (call to f_<sha>): @user_script:<n>: @user_script: <n>: -<CODE> ...".
_WRAPPED = re.compile(r"^Error running script .*?: -(\w+) (.*)$", re.S)


def refusal(exc: BaseException) -> str | None:
    """``"<CODE>: <reason>"`` when ``exc`` is Redis refusing a command for a
    while (see :data:`_REFUSALS`; redis-py's ``ClusterError`` after its
    retries of a slot in migration, and a redirection met on a connection of
    our own, count as ``TRYAGAIN``), else None."""
    if isinstance(exc, redis.exceptions.ClusterError) and not isinstance(exc, redis.ResponseError):
        return f"TRYAGAIN: {exc} (a cluster slot kept refusing: a slot migration or a failover)"
    if isinstance(exc, (redis.exceptions.AskError, redis.exceptions.MovedError)):
        # A redirection met on a connection of our own (the leader's
        # blocking wait), which no cluster client follows for us.
        return f"TRYAGAIN: slot {exc.slot_id} is served elsewhere (a cluster slot migration or a failover)"
    if not isinstance(exc, redis.ResponseError):
        return None
    text = _SCRIPT_SUFFIX.sub("", str(exc))
    code = getattr(exc, "status_code", None)
    wrapped = _WRAPPED.match(text)
    if wrapped:
        code, text = wrapped.groups()
    elif code is None:
        code, _, text = text.partition(" ")
    return f"{code}: {text}" if code in _REFUSALS else None


# How a server without Lua scripting answers a script call: EVAL, EVALSHA
# or SCRIPT renamed away (``rename-command EVAL ""``), or a Valkey built or
# started without its Lua scripting engine.
_NO_SCRIPTING = re.compile(r"unknown command [`'](eval|evalsha|script)[`']|scripting engine", re.IGNORECASE)


def scripting_missing(exc: BaseException) -> str | None:
    """The server's words when ``exc`` says it cannot run Lua scripts at
    all (the scheduler's every step is a script), else None."""
    if not isinstance(exc, redis.ResponseError):
        return None
    text = str(exc).replace("`", "'")  # Redis 6.2 quotes the command in backticks
    return text.split(",")[0].strip() if _NO_SCRIPTING.search(text) else None


def describe(client: redis.Redis) -> str:
    """A credential-free description of where a client connects."""
    if isinstance(client, RedisCluster):
        return f"{CLUSTER_SCHEME}://" + ",".join(f"{n.host}:{n.port}" for n in client.get_primaries())
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if isinstance(pool, SentinelConnectionPool):
        hosts = ",".join(
            f"{s.connection_pool.connection_kwargs.get('host')}:{s.connection_pool.connection_kwargs.get('port')}"
            for s in pool.sentinel_manager.sentinels
        )
        return f"{SENTINEL_SCHEME}://{hosts}/{pool.service_name}/{kwargs.get('db', 0)}"
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}"
    scheme = "rediss" if "ssl" in client.connection_pool.connection_class.__name__.lower() else "redis"
    return f"{scheme}://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def same_server(a: Any, b: Any) -> bool:
    """Whether two plain redis-py clients talk to the same server and
    database (by host, port and db, or unix socket path)."""
    if not isinstance(a, redis.Redis) or not isinstance(b, redis.Redis):
        return False
    if isinstance(a, RedisCluster) or isinstance(b, RedisCluster):
        return False
    if isinstance(a.connection_pool, SentinelConnectionPool) or isinstance(b.connection_pool, SentinelConnectionPool):
        return False
    ka, kb = a.connection_pool.connection_kwargs, b.connection_pool.connection_kwargs

    def where(k: dict[str, Any]) -> tuple[object, ...]:
        host = k.get("host", "localhost")
        host = "127.0.0.1" if host in ("localhost", "::1") else host
        return (k.get("path"), host, int(k.get("port", 6379) or 6379), int(k.get("db", 0) or 0))

    return where(ka) == where(kb)


def scheduler_clients(source: Any, *, op_timeout_ms: int, block_timeout_ms: int) -> tuple[redis.Redis, redis.Redis]:
    """Build the scheduler's two clients from a URL or a redis-py client.

    Returns ``(commands, blocking)``: ``commands`` times out after
    ``op_timeout_ms`` and retries at most once; ``blocking`` is for the
    follower's ``BLPOP`` and allows ``block_timeout_ms`` on top of that.
    """
    if isinstance(source, str) and urlsplit(source).scheme == CLUSTER_SCHEME:
        return _cluster_clients(_parse_cluster_url(source), op_timeout_ms, block_timeout_ms)
    if isinstance(source, RedisCluster):
        nodes = [(n.host, int(n.port)) for n in source.get_nodes()]  # type: ignore[no-untyped-call]
        carried = _CARRIED - {"host", "port", "db"}
        kwargs = {k: v for k, v in source.nodes_manager.connection_kwargs.items() if k in carried}
        return _cluster_clients((nodes, kwargs), op_timeout_ms, block_timeout_ms)
    if isinstance(source, str) and urlsplit(source).scheme == SENTINEL_SCHEME:
        return _sentinel_clients(_parse_sentinel_url(source), op_timeout_ms, block_timeout_ms)
    if isinstance(source, redis.Redis) and isinstance(source.connection_pool, SentinelConnectionPool):
        return _sentinel_clients(_sentinel_of(source.connection_pool), op_timeout_ms, block_timeout_ms)
    if isinstance(source, str):
        url = source
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise CronConfigurationError(
                "CronMiddleware: redis URL must start with redis://, rediss://, unix:// or "
                f"{SENTINEL_SCHEME}://, got {redact(url)!r}"
            )
        parts = urlsplit(url)
        if "@" in parts.path + parts.query + parts.fragment:
            # An unencoded '/', '?' or '#' in the password ends the host part
            # early: redis-py would quietly connect somewhere else.
            # (The URL goes last: redact() hides up to the last '@' of a line.)
            raise CronConfigurationError(
                "CronMiddleware: invalid redis URL: its user name or password holds a '/', '?', '#' or '@' that is not "
                f"percent-encoded (write '/' as %2F, '?' as %3F, '#' as %23, '@' as %40): {redact(url)!r}"
            )
        try:
            template = redis.Redis.from_url(url)
        except ValueError as exc:
            raise CronConfigurationError(
                f"CronMiddleware: invalid redis URL {redact(url)!r}: {redact(str(exc))}"
            ) from None
    elif isinstance(source, redis.Redis):
        template = source
    else:
        raise CronConfigurationError(
            "CronMiddleware: redis= must be a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// "
            f"URL, a redis.Redis (plain or Sentinel-managed) or a RedisCluster client, got {type(source).__name__}"
        )
    return (
        _derive(template, timeout_ms=op_timeout_ms),
        _derive(template, timeout_ms=op_timeout_ms + block_timeout_ms),
    )


def _bounded(timeout_ms: int) -> dict[str, Any]:
    """The connection options every scheduler client gets, whatever the
    user's client had: a timeout well under the lease, at most one retry,
    text replies, no background health checks."""
    timeout = timeout_ms / 1000
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 1),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "decode_responses": True,
        "health_check_interval": 0,
        **unrelaxed(),
    }


def unrelaxed() -> dict[str, Any]:
    """The option that keeps a pool's timeouts through a server's
    maintenance notifications: none followed, none relaxed (for every pool
    built from the scheduler's connection parameters)."""
    if _MaintConfig is None:
        return {}
    return {"maint_notifications_config": _MaintConfig(enabled=False, relaxed_timeout=-1)}


class _LeavesReplicas:
    """A connection that closes itself when a replica refuses a write sent
    on it, so that the next command connects again: on Sentinel to the
    master the sentinels name then, elsewhere to whatever the address
    means then (a managed Redis moves its DNS name at a failover).

    A failover that keeps the old master alive demotes it under open
    connections, and a sentinel that has not heard of a failover yet may
    name the old master for a moment.  redis-py drops a Sentinel
    connection on ``READONLY`` but keeps a plain one, and sees none in
    Redis 6's form of a script's refusal (``Error running script ...:
    -READONLY ...``): the connection stayed on the replica for ever.
    """

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except redis.ResponseError as error:
            refused = read_only(error)
            if not isinstance(refused, redis.ReadOnlyError):
                raise
            self.disconnect()  # type: ignore[attr-defined]
            if getattr(getattr(self, "connection_pool", None), "is_master", False):
                # As redis-py does on Sentinel: retried, on the master named now.
                raise redis.ConnectionError(f"the Redis master is now a replica ({error})") from None
            raise refused from None


@functools.cache
def _leaving(connection_class: type) -> type:
    """``connection_class`` with :class:`_LeavesReplicas` (same name)."""
    if issubclass(connection_class, _LeavesReplicas):
        return connection_class
    return type(connection_class.__name__, (_LeavesReplicas, connection_class), {"__module__": __name__})


def _derive(template: redis.Redis, *, timeout_ms: int) -> redis.Redis:
    pool = template.connection_pool
    kwargs = {
        key: value
        for key, value in pool.connection_kwargs.items()
        if key in _CARRIED or (key.startswith("ssl") and key != "ssl")
    }
    kwargs.update(_bounded(timeout_ms))
    new_pool = redis.ConnectionPool(connection_class=_leaving(pool.connection_class), max_connections=8, **kwargs)
    return redis.Redis(connection_pool=new_pool)


def close_clients(clients: Iterable[Any]) -> None:
    """Close every connection of these clients (and of their Sentinel
    managers, and of every node of a cluster client), in use or idle.  Each
    client stays usable: its next command connects again.  A pool built
    in another process (this is a forked child) is left alone: its
    sockets are the parent's, and touching it runs redis-py's fork check,
    which takes the pool's lock, held for ever if a thread of the parent
    held it at the fork."""
    for client in clients:
        try:
            if isinstance(client, RedisCluster):
                nodes = client.get_nodes()  # type: ignore[no-untyped-call]
                pools = [node.redis_connection.connection_pool for node in nodes if node.redis_connection]
            else:
                pools = [client.connection_pool]
                manager = getattr(client.connection_pool, "sentinel_manager", None)
                if manager is not None:
                    pools += [sentinel.connection_pool for sentinel in manager.sentinels]
            for pool in pools:
                if getattr(pool, "pid", os.getpid()) == os.getpid():
                    pool.disconnect()
        except Exception:  # closing is best effort: the process may be going down
            pass


def url_from_environment() -> str | None:
    """The URL in ``DRAMATIQ_CRON_REDIS_URL``, or None."""
    value = os.environ.get(ENV_URL, "").strip()
    return value or None


# -- Redis Sentinel -------------------------------------------------------------


class MasterChanged(redis.ReadOnlyError):
    """The Sentinel-managed master moved to another address: a failover.

    A ``ReadOnlyError`` subclass because the leader already treats that as a
    suspected failover and delays its first fire by one lease: a write the
    old master acknowledged may not have reached the new one.
    """


@dataclasses.dataclass(frozen=True)
class _SentinelSpec:
    """What the scheduler needs to build its own Sentinel-managed clients."""

    sentinels: list[tuple[str, int]]
    service: str
    master: dict[str, Any]
    sentinel: dict[str, Any]
    ssl: bool


class _WatchedConnection(_LeavesReplicas, SentinelManagedConnection):
    """Raises :class:`MasterChanged` once when it connects to a master at
    another address than the pool's previous connection did."""

    def connect_to(self, address: tuple[str, int]) -> None:
        proxy = self.connection_pool
        previous = getattr(proxy, "cron_master", None)
        super().connect_to(address)  # type: ignore[no-untyped-call]
        proxy.cron_master = tuple(address)
        if previous is not None and tuple(previous) != tuple(address):
            raise MasterChanged(f"the Redis master moved from {previous[0]}:{previous[1]} to {address[0]}:{address[1]}")


class _WatchedSSLConnection(_WatchedConnection, SentinelManagedSSLConnection):
    """:class:`_WatchedConnection` over TLS."""


def _parse_sentinel_url(url: str) -> _SentinelSpec:
    parts = urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    sentinels: list[tuple[str, int]] = []
    try:
        for item in hostlist.split(","):
            host, _, port = item.strip().rpartition(":")
            sentinels.append((host or item.strip(), int(port) if host else 26379))
    except ValueError:
        raise CronConfigurationError(f"CronMiddleware: bad sentinel address in {redact(url)!r}") from None
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise CronConfigurationError(
            f"CronMiddleware: a sentinel URL is {SENTINEL_SCHEME}://host:port[,host:port...]/service[/db], "
            f"got {redact(url)!r}"
        )
    master = {"db": int(path[1]) if len(path) == 2 else 0, **_credentials(userinfo)}
    return _SentinelSpec(sentinels=sentinels, service=path[0], master=master, sentinel={}, ssl=False)


def _sentinel_of(pool: SentinelConnectionPool) -> _SentinelSpec:
    manager = pool.sentinel_manager
    sentinels = [
        (s.connection_pool.connection_kwargs["host"], int(s.connection_pool.connection_kwargs["port"]))
        for s in manager.sentinels
    ]
    master = {k: v for k, v in pool.connection_kwargs.items() if k in _CARRIED or (k.startswith("ssl") and k != "ssl")}
    sentinel = {k: v for k, v in manager.sentinel_kwargs.items() if k in _CARRIED or k.startswith("ssl")}
    ssl = issubclass(pool.connection_class, SentinelManagedSSLConnection)
    return _SentinelSpec(sentinels=sentinels, service=pool.service_name, master=master, sentinel=sentinel, ssl=ssl)


def _sentinel_clients(
    spec: _SentinelSpec, op_timeout_ms: int, block_timeout_ms: int
) -> tuple[redis.Redis, redis.Redis]:
    # Sentinels are asked with the short timeout whatever the client, and
    # once each: the next sentinel is the retry (redis-py's default retries
    # a silent sentinel ten times with back-off, about 8 s at a 300 ms
    # timeout, at every reconnection of every pool).  Each scheduler client
    # gets its own manager and pool, so each notices a moved master by itself.
    def build(timeout_ms: int) -> redis.Redis:
        short = op_timeout_ms / 1000
        manager = Sentinel(  # type: ignore[no-untyped-call]
            spec.sentinels,
            sentinel_kwargs={
                **spec.sentinel,
                "socket_timeout": short,
                "socket_connect_timeout": short,
                "retry": Retry(NoBackoff(), 0),
                **unrelaxed(),
            },
        )
        client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
            spec.service,
            connection_class=_WatchedSSLConnection if spec.ssl else _WatchedConnection,
            **_bounded(timeout_ms),
            **spec.master,
        )
        return client

    return build(op_timeout_ms), build(op_timeout_ms + block_timeout_ms)


def sentinels_of(client: Any, *, timeout_ms: int) -> tuple[list[redis.Redis], str] | None:
    """For a Sentinel-managed scheduler client: a client for each of its
    sentinels (with ``timeout_ms`` and at most one retry, whatever the
    user's sentinel options were) and the service name; None otherwise."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return None
    return [_derive(s, timeout_ms=timeout_ms) for s in pool.sentinel_manager.sentinels], pool.service_name


# -- Redis Cluster --------------------------------------------------------------


def _parse_cluster_url(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    parts = urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    try:
        nodes = [(h, int(p)) for h, _, p in (item.strip().rpartition(":") for item in hostlist.split(","))]
    except ValueError:
        raise CronConfigurationError(
            f"CronMiddleware: a cluster URL is {CLUSTER_SCHEME}://host:port[,host:port...], got {redact(url)!r}"
        ) from None
    return nodes, _credentials(userinfo)


def _credentials(userinfo: str) -> dict[str, Any]:
    """The user name and password of a URL's user-info part, decoded."""
    if not userinfo:
        return {}
    username, has_password, password = userinfo.partition(":")
    return {"username": unquote(username) or None, "password": unquote(password) if has_password else None}


def _cluster_clients(
    spec: tuple[list[tuple[str, int]], dict[str, Any]], op_timeout_ms: int, block_timeout_ms: int
) -> tuple[redis.Redis, redis.Redis]:
    # Every key of a script shares the ``{prefix}`` hash tag (keys.py), so
    # each script runs on the one node owning that slot.  The cluster client
    # offers the same command and script API; it is typed as ``Redis`` for
    # the lease and ledger, which use nothing else.
    nodes, kwargs = spec

    def build(timeout_ms: int) -> redis.Redis:
        timeout = timeout_ms / 1000
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],  # type: ignore[no-untyped-call]
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
            decode_responses=True,
            health_check_interval=0,
            **unrelaxed(),
            **kwargs,
        )
        return cast(redis.Redis, client)

    return build(op_timeout_ms), build(op_timeout_ms + block_timeout_ms)


def pool_for(client: Any, key: str) -> Any:
    """The connection pool of the server that holds ``key``: the client's
    own, or on Redis Cluster that of the node owning the key's slot."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return node.redis_connection.connection_pool
    return client.connection_pool


def node_client(client: Any, key: str) -> redis.Redis:
    """The client of the server that holds ``key``: the client itself, or
    on Redis Cluster the node owning the key's slot (a command that must
    follow a script on its connection, such as ``WAIT``, goes there)."""
    if isinstance(client, RedisCluster):
        return cast(redis.Redis, client.get_node_from_key(key).redis_connection)  # type: ignore[no-untyped-call]
    return cast(redis.Redis, client)


def presence_client(source: Any, *, op_timeout_ms: int) -> redis.Redis | None:
    """One dedicated connection whose id the leader registers (fast
    takeover): it closes when the process dies.  None, with one WARNING,
    where fast takeover cannot work (Redis Cluster, an ACL without
    ``CLIENT``)."""
    logger = get_logger(__name__, "presence_client")  # type: ignore[no-untyped-call]
    client, _ = scheduler_clients(source, op_timeout_ms=op_timeout_ms, block_timeout_ms=0)
    if not isinstance(client, redis.Redis) or isinstance(client, RedisCluster):
        logger.warning(
            "fast_takeover is not available on Redis Cluster (connection ids are per node); using lease-only takeover."
        )
        return None
    presence = redis.Redis(connection_pool=client.connection_pool, single_connection_client=True)
    try:
        presence.client_list(client_id=[presence.client_id()])
    except redis.ResponseError as exc:  # NoPermissionError: an ACL without CLIENT
        logger.warning(
            "fast_takeover needs the CLIENT command (ACL +client|id +client|list): %s; using lease-only takeover.",
            redact(str(exc)),
        )
        presence.close()
        return None
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        pass  # unreachable now: checked again by the leader when it follows
    return presence


def dedicated_connection(client: Any, key: str) -> Any:
    """A connection to the server holding ``key``, outside any pool, made
    (and connected, if Redis answers) now: the shutdown path must not wait
    for a pool's lock.  None when none can be made."""
    try:
        pool = pool_for(client, key)
        connection = pool.connection_class(**pool.connection_kwargs)
    except Exception:  # an unusual client: the lease expires on its own
        return None
    try:
        connection.connect()
    except (redis.RedisError, OSError):
        pass  # unreachable now: connected at the hand-over
    return connection


def _waiting(client: redis.Redis, *, threads: int, timeout_ms: int) -> redis.Redis:
    """The client with a pool that waits for a free connection instead of
    failing (every worker thread may use it at once, and the scheduler's
    plain pools allow eight connections).  Sentinel and Cluster pools are
    unbounded and kept."""
    pool = getattr(client, "connection_pool", None)
    if type(pool) is not redis.ConnectionPool:
        return client
    blocking = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        connection_class=pool.connection_class,
        max_connections=max(threads, 8),
        timeout=timeout_ms / 1000,
        **pool.connection_kwargs,
        **unrelaxed(),
    )
    return redis.Redis(connection_pool=blocking)


class Connections:
    """Every Redis client of one scheduler, from one source: the one place
    they are built, each kind once (when first needed), closed together.

    The kinds: the scheduler's command and blocking clients; the
    operators' (``Timing.OPERATOR_TIMEOUT_MS``); the worker threads' (run
    records, running marks, deduplication), closed apart once the worker
    has drained; the shutdown hand-over's connection outside any pool;
    the fast takeover's presence connection; one client per sentinel.
    A closed client reconnects when used again.

    Parameters:
      source: A URL or a redis-py client (see :func:`scheduler_clients`).
      timing: The durations every timeout derives from.
    """

    def __init__(self, source: Any, *, timing: Timing) -> None:
        self.source = source
        self.timing = timing
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._built: dict[object, Any] = {}
        self._owned: list[Any] = []
        self._workers: list[Any] = []

    def _once(self, kind: object, build: Any, *, workers: bool = False) -> Any:
        """The client(s) of ``kind``, built by ``build`` the first time
        (a client, a pair, or a sentinels' list and name), noted to close."""
        with self._lock:
            if kind not in self._built:
                built = self._built[kind] = build()
                clients = built[0] if kind == "sentinels" and built else built
                if clients is not None:
                    owner = self._workers if workers else self._owned
                    owner.extend(clients if isinstance(clients, (tuple, list)) else [clients])
            return self._built[kind]

    def _clients(self, op_timeout_ms: int, block_timeout_ms: int = 0) -> tuple[redis.Redis, redis.Redis]:
        return scheduler_clients(self.source, op_timeout_ms=op_timeout_ms, block_timeout_ms=block_timeout_ms)

    def scheduler(self) -> tuple[redis.Redis, redis.Redis]:
        """``(commands, blocking)``: the lease's, the ledger's and the
        leader's blocking waits.  Raises :class:`CronConfigurationError`
        for a source that cannot be used (a malformed URL)."""
        t = self.timing
        pair: tuple[redis.Redis, redis.Redis] = self._once(
            "scheduler", lambda: self._clients(t.op_timeout_ms, t.block_timeout_ms)
        )
        return pair

    def operator(self) -> redis.Redis:
        """The operators' client (the API, the CLI, the dashboard)."""
        client: redis.Redis = self._once("operator", lambda: self._clients(Timing.OPERATOR_TIMEOUT_MS)[0])
        return client

    def for_workers(self, timeout_ms: int, *, threads: int = 0) -> redis.Redis:
        """A client for the worker threads, timing out after ``timeout_ms``
        (one per timeout); with ``threads``, one whose pool waits for a
        free connection, of at least that many."""

        def build() -> redis.Redis:
            client = self._clients(timeout_ms)[0]
            return _waiting(client, threads=threads, timeout_ms=timeout_ms) if threads else client

        client: redis.Redis = self._once(("workers", timeout_ms, threads), build, workers=True)
        return client

    def shutdown(self, key: str) -> Any:
        """A new connection for the shutdown hand-over, to the server
        holding ``key``, outside any pool (see :func:`dedicated_connection`),
        each attempt bounded by ``Timing.HAND_OVER_ATTEMPT_MS``."""
        timeout_ms = min(self.timing.op_timeout_ms, Timing.HAND_OVER_ATTEMPT_MS)
        return dedicated_connection(self._once("shutdown", lambda: self._clients(timeout_ms)[0]), key)

    def presence(self) -> redis.Redis | None:
        """A new presence connection for fast takeover (see
        :func:`presence_client`), closed with the rest."""
        presence = presence_client(self.source, op_timeout_ms=self.timing.op_timeout_ms)
        if presence is not None:
            with self._lock:
                self._owned.append(presence)
        return presence

    def sentinels(self) -> tuple[list[redis.Redis], str] | None:
        """A client per sentinel of a Sentinel-managed source, and the
        service name; None otherwise (see :func:`sentinels_of`)."""
        command = self.scheduler()[0]
        found: tuple[list[redis.Redis], str] | None = self._once(
            "sentinels", lambda: sentinels_of(command, timeout_ms=self.timing.replica_wait_ms)
        )
        return found

    def close(self) -> None:
        """Close every connection but the worker threads'."""
        close_clients(self._listed(self._owned))

    def close_workers(self) -> None:
        """Close the worker threads' connections (once they have drained)."""
        close_clients(self._listed(self._workers))

    def _listed(self, clients: list[Any]) -> list[Any]:
        if os.getpid() != self._pid:
            # A forked child: no thread of its own builds a client now, and a
            # thread of the parent may have held the lock at the fork.
            return list(clients)
        with self._lock:
            return list(clients)
