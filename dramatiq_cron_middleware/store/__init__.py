"""The store: everything the leader keeps outside its own process.

:mod:`.abc` says what the leader needs of it (a lease, a fenced ledger and
the runtime schedules' reads), each method with its guarantee;
:mod:`.redis_store` is that protocol on Redis (today's Lua scripts) and
:mod:`.in_memory` the same semantics in one process, on an injected clock.
One contract suite (``tests/store/test_contract.py``) runs against both.
"""

from __future__ import annotations

from .abc import LeaseStore, LedgerStore, RuntimeReads, Settled, Store

__all__ = ["LeaseStore", "LedgerStore", "RuntimeReads", "Settled", "Store"]
