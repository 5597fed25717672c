"""The store protocol on Redis: today's :class:`~..lease.Lease`,
:class:`~..ledger.Ledger` and :class:`~..runtime.RuntimeSchedules`, their
Lua scripts unchanged.

:class:`~..lease.Lease` and :class:`~..runtime.RuntimeSchedules` already
speak the protocol; the ledger's lost-reply settlement is adapted here so
that what the record was like comes back as a value, not as an attribute
read after the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .abc import Settled
from .boundary import Payload
from .clock import ServerClock
from .keys import Keys
from .lease import Lease
from .ledger import Claim, ClaimReply, Ledger, SyncEntry, SyncReply
from .runtime import RuntimeSchedules

if TYPE_CHECKING:
    from .abc import Store

__all__ = ["RedisLedger", "RedisStore"]


class RedisLedger:
    """:class:`~.abc.LedgerStore` over a :class:`~..ledger.Ledger`."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def sync(
        self,
        token: str,
        epoch: int,
        schedules: Sequence[str | SyncEntry],
        *,
        now_ms: int | None = None,
        expect_ledger: bool = False,
        on_chunk: Callable[[Iterable[tuple[str, int]]], None] | None = None,
    ) -> SyncReply:
        return self.ledger.sync(token, epoch, schedules, now_ms=now_ms, expect_ledger=expect_ledger, on_chunk=on_chunk)

    def register(self, schedules: Sequence[SyncEntry]) -> int:
        return self.ledger.register(schedules)

    def claim(
        self,
        token: str,
        epoch: int,
        batch_id: str,
        claims: Sequence[Claim],
        payloads: Sequence[Payload | None] | None = None,
    ) -> ClaimReply:
        return self.ledger.claim(token, epoch, batch_id, claims, payloads)

    def settle(self, batch_id: str, *, epoch: int, claims: Sequence[Claim]) -> Settled:
        results = self.ledger.batch_results(batch_id, epoch=epoch, claims=claims)
        return Settled(results, record_corrupt=self.ledger.last_settle_corrupt)


class RedisStore:
    """One candidate's :class:`~.abc.Store` on Redis.

    Parameters:
      lease: The candidate's lease handle.
      ledger: The fenced ledger (on the same client and clock as ``lease``).
      runtime: The runtime schedules.  Defaults to None: declared only.
    """

    def __init__(self, *, lease: Lease, ledger: Ledger, runtime: RuntimeSchedules | None = None) -> None:
        self._lease = lease
        self._ledger = RedisLedger(ledger)
        self._runtime = runtime

    @property
    def keys(self) -> Keys:
        return self._lease.keys

    @property
    def clock(self) -> ServerClock:
        return self._lease.clock

    @property
    def lease(self) -> Lease:
        return self._lease

    @property
    def ledger(self) -> RedisLedger:
        return self._ledger

    @property
    def runtime(self) -> RuntimeSchedules | None:
        return self._runtime


if TYPE_CHECKING:

    def _conforms(store: RedisStore) -> Store:
        return store  # mypy checks the protocol here
