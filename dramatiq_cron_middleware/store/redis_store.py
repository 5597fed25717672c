"""The store protocol on Redis: :class:`~.lease.Lease`,
:class:`~.ledger.Ledger` and :class:`~.runtime.RuntimeSchedules`, which
speak it as they are.
"""

from __future__ import annotations

from .clock import ServerClock
from .keys import Keys
from .lease import Lease
from .ledger import Ledger
from .runtime import RuntimeSchedules

__all__ = ["RedisStore"]


class RedisStore:
    """One candidate's :class:`~.abc.Store` on Redis.

    Parameters:
      lease: The candidate's lease handle.
      ledger: The fenced ledger (on the same client and clock as ``lease``).
      runtime: The runtime schedules.  Defaults to None: declared only.
    """

    def __init__(self, *, lease: Lease, ledger: Ledger, runtime: RuntimeSchedules | None = None) -> None:
        self.lease = lease
        self.ledger = ledger
        self.runtime = runtime
        self.keys: Keys = lease.keys
        self.clock: ServerClock = lease.clock
