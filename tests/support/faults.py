"""Faults of the in-memory store: a :class:`MemoryServer` whose operations
(named by the protocol's method names) can lose their reply or be refused,
for tests only (the production store has no such switch)."""

from __future__ import annotations

from collections.abc import Callable

from dramatiq_cron_middleware.store.in_memory import MemoryServer

__all__ = ["FaultyServer"]


class FaultyServer(MemoryServer):
    """:meth:`lose_reply` lets the next calls of an operation run and then
    raises :class:`TimeoutError` (a lost reply); :meth:`refuse` raises
    :class:`ConnectionRefusedError` before they run (nothing written)."""

    def __init__(self, *, now_ms: Callable[[], int], wait: Callable[[float], None] | None = None) -> None:
        super().__init__(now_ms=now_ms, wait=wait)
        self.lost: dict[str, int] = {}
        self.refused: dict[str, int] = {}

    def lose_reply(self, operation: str, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` run, then raise TimeoutError."""
        self.lost[operation] = self.lost.get(operation, 0) + times

    def refuse(self, operation: str, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` raise ConnectionRefusedError without running."""
        self.refused[operation] = self.refused.get(operation, 0) + times

    def call(self, operation: str, run: Callable[[], object]) -> object:
        if self.refused.get(operation, 0) > 0:
            self.refused[operation] -= 1
            raise ConnectionRefusedError(f"memory store refused {operation} (injected)")
        result = super().call(operation, run)
        if self.lost.get(operation, 0) > 0:
            self.lost[operation] -= 1
            raise TimeoutError(f"memory store lost the reply of {operation} (injected)")
        return result
