"""tests/apps/cronapp.py, with signals delivered while the shutdown path runs.

The app wraps the worker's SIGTERM handler (outermost, after every
middleware chained its own) and, while that handler runs on the main
thread, raises SIGTERM again, once at each of the moments where a
handler that locks would deadlock or an exit would cut a release short:
inside ``threading.Event.set`` with the event's lock held, just before a
Redis connection sends a command, and just before it reads a reply (by
then dramatiq's handler has run once, so this one exits the process).
The nested handler runs on the same thread, as it does when systemd,
``timeout`` or ``kill -TERM -<pgid>`` and dramatiq's forwarding deliver
signals a few microseconds apart.

``SIGNAL_STORM_BURST=N`` also raises N SIGTERMs just before *every*
command a connection sends in that handler: a storm that outlasts any
number of retries (dramatiq exits at its second signal, before the
release is on the wire, every time).

``SIGNAL_STORM_AT_STOP=N`` raises N SIGTERMs, nested, the first time that
handler stops the leader thread (``StopRequest.set``): the instant the
hand-over has begun but sends nothing yet, where a storm's exit could cut
it short.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

import dramatiq
import redis.connection
from dramatiq.middleware import Middleware

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.stop_request import StopRequest
from tests.apps.cronapp import broker

__all__ = ["broker"]

_depth = 0
_raised: set[str] = set()
_BURST = int(os.environ.get("SIGNAL_STORM_BURST", "0"))
_AT_STOP = int(os.environ.get("SIGNAL_STORM_AT_STOP", "0"))


def _raise_nested(where: str) -> None:
    """Deliver SIGTERM now, nested, the first time the outermost handler
    gets ``where``."""
    if _depth == 1 and where not in _raised and threading.current_thread() is threading.main_thread():
        _raised.add(where)
        signal.raise_signal(signal.SIGTERM)


_send = redis.connection.AbstractConnection.send_packed_command
_read = redis.connection.AbstractConnection.read_response


def _send_with_signal(self: Any, command: Any, check_health: bool = True) -> None:
    _raise_nested("send")
    if _BURST and _depth == 1 and threading.current_thread() is threading.main_thread():
        for _ in range(_BURST):
            signal.raise_signal(signal.SIGTERM)
    _send(self, command, check_health)


def _read_with_signal(self: Any, *args: Any, **kwargs: Any) -> Any:
    _raise_nested("read")
    return _read(self, *args, **kwargs)


_stop_set = StopRequest.set


def _stop_set_with_signals(self: StopRequest) -> None:
    if _AT_STOP and _depth == 1 and "stop" not in _raised and threading.current_thread() is threading.main_thread():
        _raised.add("stop")
        for _ in range(_AT_STOP):
            signal.raise_signal(signal.SIGTERM)
    _stop_set(self)


def _set_with_signal(self: threading.Event) -> None:
    with self._cond:  # type: ignore[attr-defined]
        _raise_nested("Event.set")
        self._flag = True  # type: ignore[attr-defined]
        self._cond.notify_all()  # type: ignore[attr-defined]


class SignalStorm(Middleware):
    """Installs the outermost SIGTERM handler and the two injection points."""

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        previous = signal.getsignal(signal.SIGTERM)
        assert callable(previous)

        def outermost(signum: int, frame: FrameType | None) -> Any:
            global _depth
            _depth += 1
            try:
                return previous(signum, frame)
            finally:
                _depth -= 1

        redis.connection.AbstractConnection.send_packed_command = _send_with_signal  # type: ignore[method-assign]
        redis.connection.AbstractConnection.read_response = _read_with_signal  # type: ignore[method-assign]
        threading.Event.set = _set_with_signal  # type: ignore[method-assign]
        StopRequest.set = _stop_set_with_signals  # type: ignore[method-assign]
        signal.signal(signal.SIGTERM, outermost)


# dramatiq runs after_* hooks in reverse order: placed before the cron
# middleware, this hook runs after it and wraps the handler it chained.
broker.add_middleware(SignalStorm(), before=CronMiddleware)
