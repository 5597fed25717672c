"""Durable writes: a lease or ledger write counts only once replicas hold it.

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
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis
from redis.exceptions import NoScriptError

from .connection import node_client

__all__ = ["Durability", "Unconfirmed", "required_replicas"]


class Unconfirmed(Exception):
    """A write ran on the master, but fewer replicas than required
    acknowledged it within the wait: it may not survive a failover."""

    def __init__(self, *, acked: int, required: int, wait_ms: int) -> None:
        super().__init__(f"{acked} of {required} replica(s) acknowledged within {wait_ms} ms")
        self.acked = acked
        self.required = required


@dataclasses.dataclass
class Durability:
    """How many replicas must hold a write before it counts.  Shared by a
    candidate's lease and ledger; ``replicas`` is set once, before the
    first write (the default is decided by the boot check, on the first
    reply of Redis: see :func:`required_replicas`).

    Parameters:
      replicas: Replicas that must acknowledge (0: none, no ``WAIT``).
      wait_ms: How long ``WAIT`` waits for them (below the op timeout).
    """

    replicas: int = 0
    wait_ms: int = 100

    @property
    def on(self) -> bool:
        """Whether writes wait for replicas."""
        return self.replicas > 0

    def run(self, client: redis.Redis, script: Any, keys: list[str], args: list[Any]) -> tuple[Any, int]:
        """Run ``script`` (registered with :func:`~.codes.load_script`),
        then ``WAIT`` on the same connection, in one round trip: its raw
        reply and how many replicas acknowledged it (pass that to
        :meth:`check` once the reply is read)."""
        if not self.on:
            return script(keys=keys, args=args), 0
        node = node_client(client, keys[0])
        for attempt in (1, 2):
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", self.replicas, self.wait_ms)  # type: ignore[no-untyped-call]
            try:
                raw, acked = pipe.execute()
            except NoScriptError:  # a restarted or new master: load it, once
                if attempt == 2:
                    raise
                node.script_load(script.script)
                continue
            return raw, int(acked)
        raise AssertionError("unreachable")  # pragma: no cover

    def check(self, acked: int) -> None:
        """Raise :class:`Unconfirmed` when ``acked`` falls short."""
        if acked < self.replicas:
            raise Unconfirmed(acked=acked, required=self.replicas, wait_ms=self.wait_ms)


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
