"""A stop request that a signal handler may make.

``threading.Event.set`` takes a lock that the code a signal handler
interrupts may hold (on the main thread, another ``set``): the handler
then waits for itself forever.  A :class:`StopRequest` is a plain flag and
a byte written to a non-blocking socket pair; the leader thread's local
waits select on the other end.  Setting it takes no lock and never blocks.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable

__all__ = ["StopRequest"]


class StopRequest:
    """Set once, from any thread or a signal handler; waited on by one thread.

    Parameters:
      clock: Stamps :attr:`at` (monotonic seconds; injected in tests).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: When the stop was first requested (by ``clock``); None before.
        self.at: float | None = None
        self._set = False
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def set(self) -> None:
        """Request the stop and wake a :meth:`wait` at once (signal safe:
        assignments and a non-blocking send)."""
        if self.at is None:
            self.at = self._clock()
        self._set = True
        try:
            self._writer.send(b"\0")
        except OSError:  # the buffer is full (already woken) or the pair is closed
            pass

    def is_set(self) -> bool:
        """Whether a stop was requested."""
        return self._set

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the request; True when made.
        (``select`` is cooperative under gevent.)"""
        if not self._set and timeout > 0:
            try:
                select.select([self._reader], [], [], timeout)
            except (OSError, ValueError):  # closed: nothing more to wait for
                pass
        return self._set

    def close(self) -> None:
        """Release the socket pair (a later :meth:`set` only sets the flag)."""
        self._reader.close()
        self._writer.close()
