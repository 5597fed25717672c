"""The store protocol in one process: the Lua scripts' semantics in Python.

A :class:`MemoryServer` plays the Redis server: it holds the lease, the
ledger, the history, the batch records and the runtime definitions, and
reads time from an injected clock (epoch ms), on which TTLs expire.  Each
candidate gets an :class:`InMemoryStore` on it (its own lease handle, as a
process has its own :class:`~..lease.Lease`).  No thread, no socket: a
leader can run on it in-process, on a fake clock.

Every operation passes :meth:`MemoryServer.call` by name (the protocol's
method names), where a test double injects faults (a lost reply, a
refusal: tests/support/faults.py); :attr:`MemoryServer.replicas_acking` says how
many replicas acknowledge writes now (a store that requires more raises
:class:`~.durability.Unconfirmed` after its write ran).  Keys holding a foreign type are not modelled:
the corrupt flags stay empty but for unusable batch records.
"""

from __future__ import annotations

from .clock import ServerClock
from .durability import Durability
from .keys import Keys
from .lease import Candidate
from .memory.lease import MemoryLease
from .memory.ledger import MemoryLedger
from .memory.operator import MemoryOperator
from .memory.runs import MemoryRuns
from .memory.runtime import MemoryRuntime, MemoryRuntimeSchedules
from .memory.server import MemoryServer

__all__ = ["InMemoryStore", "MemoryOperator", "MemoryRuns", "MemoryRuntimeSchedules", "MemoryServer"]

#: Who a memory candidate is unless told: not this process.
_ANONYMOUS = Candidate(host="memory", pid=0)


class InMemoryStore:
    """One candidate's :class:`~.abc.Store` on a :class:`MemoryServer`.

    Parameters:
      server: The shared state.
      clock: Observes the server's time on every reply that carries it.
      ttl_ms: The lease length in milliseconds.
      candidate: Who this candidate is (host and pid shown as the leader's
        identity, fingerprint and version published).  Defaults to host
        "memory", pid 0, nothing published.
      presence: Register a presence connection (fast takeover).  Default False.
      history_length: Cap of the history.  Defaults to 10000.
      prefix: The key prefix the names in reports use.  Defaults to "cron".
      durability: How many replicas must acknowledge an acquisition, a
        renewal, a claim or a settle, and on Sentinel who must name the
        server's ``address`` as the master after each (see durability.py).
        Defaults to none.
    """

    def __init__(
        self,
        server: MemoryServer,
        *,
        clock: ServerClock,
        ttl_ms: int,
        candidate: Candidate = _ANONYMOUS,
        presence: bool = False,
        history_length: int = 10_000,
        prefix: str = "cron",
        durability: Durability | None = None,
    ) -> None:
        self.server = server
        self.keys = Keys(prefix)
        self.clock = clock
        durability = durability or Durability()
        self.lease = MemoryLease(
            server, ttl_ms=ttl_ms, clock=clock, candidate=candidate, presence=presence, durability=durability
        )
        self.ledger = MemoryLedger(server, clock=clock, history_length=history_length, durability=durability)
        self.runtime = MemoryRuntime(server, history_length=history_length)
        #: Run monitoring's storage (not part of the leader's :class:`~.abc.Store`).
        self.runs = MemoryRuns(server, events_length=history_length)
