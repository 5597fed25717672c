"""Durable writes: a lease or ledger write counts only once replicas hold
it and, on Sentinel, a majority of the sentinels name its master.

Redis replicates asynchronously.  A claim that a master granted and then
lost in a failover is granted again by the next master: two enqueues of one
tick.  ``WAIT n timeout`` answers how many replicas acknowledged every write
the connection made before it; the scheduler sends it in the same pipeline
(one connection, one round trip) right after each acquisition, renewal,
claim and settle, and treats a write fewer than ``n`` replicas acknowledged
as :class:`Unconfirmed`: a claim like a lost reply (settled later, its
ticks enqueued only once a confirmed settle proves them durable), a renewal
like a failed one (the firing deadline keeps running).  Since replication
is ordered, a confirmed write also proves durable everything written
before it on that master.

On Sentinel a replica's acknowledgement is not enough: in a partition the
replica may be on the master's side while a majority of sentinels, on the
other side, promotes a replica that never saw the write.  So once ``WAIT``
answered, a majority of the sentinels must also name the server the write
ran on as their master, seen up (:class:`SentinelQuorum`).  A failover needs
such a majority, and every sentinel of a partition's other side is out of
the writer's reach: see docs/design.md, "Sentinel partitions".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import redis
from redis.exceptions import NoScriptError

from .codes import read_only
from .connection import node_client

__all__ = ["Ack", "Durability", "SentinelQuorum", "Unconfirmed", "required_replicas"]


class Unconfirmed(Exception):
    """A write ran on the master, but fewer replicas than required
    acknowledged it within the wait, or too few sentinels name that master:
    it may not survive a failover."""

    def __init__(self, *, acked: int, required: int, wait_ms: int, sentinels: str = "") -> None:
        super().__init__(sentinels or f"{acked} of {required} replica(s) acknowledged within {wait_ms} ms")
        self.acked = acked
        self.required = required
        #: Why the sentinels do not confirm it ("": the replicas fell short).
        self.sentinels = sentinels


@dataclasses.dataclass(frozen=True)
class Ack:
    """What a durable write's reply says about its durability."""

    #: Replicas that acknowledged it (``WAIT``'s reply).
    replicas: int
    #: The address of the server the write ran on (the connection's).
    master: tuple[str, int] | None = None


class SentinelClient(Protocol):
    """What :class:`SentinelQuorum` asks of a sentinel's client (redis-py's
    ``Redis.sentinel_master``)."""

    def sentinel_master(self, service_name: str) -> Any:
        """The sentinel's state of the service's master, parsed."""


class SentinelQuorum:
    """Asks the sentinels, one by one, whether they name a server as the
    service's master and see it up (``SENTINEL MASTER``: its address, not
    subjectively or objectively down), until a majority of all the
    sentinels watching it agree (the listed ones, or more when a reply
    counts more: ``num-other-sentinels``).  Those that answered yes are
    asked first the next time, so one unreachable sentinel costs nothing
    while a majority answers.

    Parameters:
      sentinels: A client for each listed sentinel (short timeouts).
      service: The master's service name.
    """

    def __init__(self, sentinels: Sequence[SentinelClient], *, service: str) -> None:
        self._sentinels = list(sentinels)
        self.service = service
        self._watching = len(self._sentinels)

    def confirm(self, master: tuple[str, int] | None) -> str:
        """Why ``master`` is not confirmed ("" when a majority names it)."""
        needed = self._watching // 2 + 1
        agree: list[SentinelClient] = []
        for sentinel in list(self._sentinels):
            try:
                state = sentinel.sentinel_master(self.service)
            except (redis.RedisError, OSError):
                continue
            if not isinstance(state, dict):
                continue
            self._watching = max(self._watching, int(state.get("num-other-sentinels", 0)) + 1)
            needed = self._watching // 2 + 1
            if master is not None and _names(state, master):
                agree.append(sentinel)
                if len(agree) >= needed:
                    break
        self._sentinels = agree + [s for s in self._sentinels if s not in agree]
        if len(agree) >= needed:
            return ""
        where = "an unknown server" if master is None else f"{master[0]}:{master[1]}"
        return (
            f"{len(agree)} of the {needed} sentinel(s) needed name {where} as the master and see it up: "
            "a partition or failover may be under way"
        )


def _names(state: dict[str, Any], master: tuple[str, int]) -> bool:
    return (
        (str(state.get("ip")), int(state.get("port", 0))) == master
        and bool(state.get("is_master"))
        and not state.get("is_sdown")
        and not state.get("is_odown")
    )


@dataclasses.dataclass
class Durability:
    """How many replicas must hold a write before it counts, and on
    Sentinel who must name its master.  Shared by a candidate's lease and
    ledger; ``replicas`` is set once, before the first write (the default
    is decided by the boot check, on the first reply of Redis: see
    :func:`required_replicas`).

    Parameters:
      replicas: Replicas that must acknowledge (0: none, no ``WAIT``).
      wait_ms: How long ``WAIT`` waits for them (below the op timeout).
      sentinels: On Sentinel, the majority that must name the master a
        write ran on.  None: replicas alone decide (no Sentinel).
    """

    replicas: int = 0
    wait_ms: int = 100
    sentinels: SentinelQuorum | None = None

    @property
    def on(self) -> bool:
        """Whether writes wait for replicas."""
        return self.replicas > 0

    def run(self, client: redis.Redis, script: Any, keys: list[str], args: list[Any]) -> tuple[Any, Ack]:
        """Run ``script`` (registered with :func:`~.codes.load_script`),
        then ``WAIT`` on the same connection, in one round trip: its raw
        reply and what confirms it (pass that to :meth:`check` once the
        reply is read)."""
        if not self.on:
            return script(keys=keys, args=args), Ack(0)
        node = node_client(client, keys[0])
        for attempt in (1, 2):
            commands = [("EVALSHA", script.sha, len(keys), *keys, *args), ("WAIT", self.replicas, self.wait_ms)]
            (raw, acked), master = _on_one_connection(node.connection_pool, commands)
            if isinstance(raw, NoScriptError):  # a restarted or new master: load it, once
                if attempt == 2:
                    raise raw
                node.script_load(script.script)
                continue
            if isinstance(raw, Exception):
                raise raw
            return raw, Ack(int(acked), master)
        raise AssertionError("unreachable")  # pragma: no cover

    def check(self, ack: Ack) -> None:
        """Raise :class:`Unconfirmed` when ``ack`` falls short: too few
        replicas, or (on Sentinel, asked now, after the write) too few
        sentinels naming the master it ran on."""
        if ack.replicas < self.replicas:
            raise Unconfirmed(acked=ack.replicas, required=self.replicas, wait_ms=self.wait_ms)
        if self.sentinels is not None:
            why = self.sentinels.confirm(ack.master)
            if why:
                raise Unconfirmed(acked=ack.replicas, required=self.replicas, wait_ms=self.wait_ms, sentinels=why)


def _on_one_connection(pool: Any, commands: list[tuple[Any, ...]]) -> tuple[list[Any], tuple[str, int] | None]:
    """Send ``commands`` in one round trip on one connection, held until
    its address is read: the replies (an error reply as its exception)
    and the address of the server that ran them.  A connection fault is
    retried as the client's retry policy says (reconnected: on Sentinel
    to the master the sentinels name now, ``MasterChanged`` if it moved)."""
    connection = pool.get_connection()

    def send() -> list[Any]:
        connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(connection.read_response())
            except redis.ResponseError as error:
                replies.append(read_only(error))
                if isinstance(replies[-1], redis.ReadOnlyError):
                    # A replica: the rest of the replies go unread, so the
                    # connection is closed (the scheduler's plain and Sentinel
                    # connections have closed themselves already, see
                    # connection.py's _LeavesReplicas) and none is read
                    # as another command's.
                    connection.disconnect()
                    return replies + [replies[-1]] * (len(commands) - len(replies))
        return replies

    try:
        replies = connection.retry.call_with_retry(send, lambda error: connection.disconnect())
        host, port = getattr(connection, "host", None), getattr(connection, "port", None)
        return replies, (str(host), int(port)) if host is not None and port is not None else None
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def required_replicas(client: Any, *, sentinel: bool, key: str) -> int:
    """The default (``replicas=None``): one replica on a Sentinel-managed
    master or a master that has replicas connected now; none on a single
    Redis, or where ``INFO`` is refused (managed services: set it)."""
    if sentinel:
        return 1
    try:
        info = node_client(client, key).info("replication")
    except redis.ResponseError:
        return 0
    return 1 if int(info.get("connected_slaves", 0) or 0) > 0 else 0
