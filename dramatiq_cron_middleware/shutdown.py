"""The hand-over at shutdown: release the lease the moment the worker
process is told to stop.

dramatiq's worker process notices SIGTERM/SIGHUP only at its next
once-a-second poll, and exits at once on a second signal, which is what a
control-group stop delivers (systemd, ``timeout``, ``kill -TERM -<pgid>``:
every process gets the signal, and dramatiq's main process forwards
another).  So a handler chained before dramatiq's releases the lease
synchronously, and an ``atexit`` hook finishes a release that an exit
interrupted.

A signal handler runs on the main thread between two bytecodes of whatever
it was doing, and the next signal interrupts the handler the same way.  So
the handler takes no lock and calls nothing that does (no
``threading.Event``, no connection pool, no logging): it sets plain flags,
wakes the leader thread through its :class:`~.stop_request.StopRequest`,
and sends one pipeline (the compare-and-delete release and a push that
ends the leader thread's blocking wait) on a connection made for it
beforehand.  A nested handler finds the flag set and only chains on.
"""

from __future__ import annotations

import atexit
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from .store.codes import decode
from .store.connection import pool_for, redact

if TYPE_CHECKING:
    from .leader.thread import LeaderThread

__all__ = ["HandOver", "dedicated_connection", "install"]

#: The signals whose handlers the hand-over chains.
HANDLED = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP", "SIGINT")) if s is not None)


class HandOver:
    """Releases one leader thread's lease at shutdown, at most once.  The
    leader thread reports the outcome as it stops (``atexit`` does if it
    never gets the chance).

    Parameters:
      leader: The leader thread.
      connection: A redis-py connection of the hand-over's own (see
        :func:`dedicated_connection`), or None to leave the release to the
        leader thread and the lease's expiry.
    """

    def __init__(self, *, leader: LeaderThread[Any], connection: Any) -> None:
        self.leader = leader
        self.connection = connection
        #: A hand-over began (a nested signal must not reuse the connection).
        self._begun = False
        #: The release's reply was read: True released, False not ours.
        self._released: bool | None = None
        self._epoch: int | None = None
        self._error: str | None = None
        self._reported = False
        #: The release, read before the leader thread is told to stop.
        self._commands: list[tuple[Any, ...]] | None = None

    def on_signal(self) -> None:
        """The signal handler's part: stop the leader thread and release.
        Takes no lock and never waits for one."""
        if self._begun:
            return
        self._begun = True
        self._take_token()
        self.leader.request_stop()
        if _gevent_patched():
            # Under gevent a handler runs in the hub, where a socket cannot
            # block: release from a greenlet, which runs once it returns.
            import gevent  # type: ignore[import-untyped]

            gevent.spawn(self._send)
            return
        # A nested signal runs dramatiq's handler, whose second call raises
        # SystemExit out of whatever this frame is waiting in; in a storm,
        # again at every retry.  In a forked worker no atexit hook runs
        # after that (multiprocessing ends the child with os._exit).  So
        # the signals that come meanwhile are held until the release is
        # answered, then delivered (once each, as the kernel coalesces
        # them); an exit that came before they were held is deferred.
        held: list[int] = []
        deferred: BaseException | None = None
        previous: dict[int, Any] = {}
        try:
            _hold(held, previous)
        except BaseException as exc:
            deferred = exc
        try:
            for _ in range(3):
                try:
                    self._send()
                    break
                except BaseException as exc:
                    deferred = deferred or exc
        finally:
            _restore(previous)
        if deferred is not None:
            raise deferred
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)

    def at_exit(self) -> None:
        """The ``atexit`` part: release if no handler finished doing so (an
        exit may interrupt one half-way), and report it unless the leader
        thread did."""
        self._begun = True
        self._take_token()
        self.leader.request_stop()
        if self._released is None:
            self._send()
        logger = self.leader.logger
        if self.claim_report(wait=0.0):
            logger.info("Released cron leadership (epoch %s).", self._epoch)
        elif self._error is not None and self._epoch is not None:
            logger.warning(
                "Could not release the cron lease at shutdown: %s; it expires within %d ms.",
                self._error,
                self.leader.timing.lease_ms,
            )

    def claim_report(self, *, wait: float) -> bool:
        """True, once, when this hand-over released the lease, waiting up to
        ``wait`` seconds for one under way (never from a signal handler:
        the caller logs)."""
        deadline = time.monotonic() + wait
        while self._begun and self.connection is not None and self._released is None and time.monotonic() < deadline:
            time.sleep(0.002)
        if not self._released or self._reported:
            return False
        self._reported = True
        return True

    def close(self) -> None:
        """Retire the hand-over (the leader thread was stopped and released
        the plain way) and close its connection."""
        self._begun = True
        if self.connection is not None:
            self.connection.disconnect()

    def _take_token(self) -> None:
        """Read the release (its token) and the epoch now: once told to
        stop, the leader thread releases too, and drops its token as it
        sends; an exit may end that thread before its release is sent."""
        if self._commands is None:
            self._epoch = self.leader.epoch
            self._commands = self.leader.lease.hand_over_commands()

    def _send(self) -> None:
        connection = self.connection
        commands = self._commands
        if connection is None or commands is None:
            return
        for attempt in (1, 2):  # a connection the server closed while idle fails once
            try:
                connection.send_packed_command(connection.pack_commands(commands))
                replies = [connection.read_response() for _ in commands]
            except (redis.RedisError, OSError) as exc:
                connection.disconnect()
                self._error = redact(f"{type(exc).__name__}: {exc}")
                if attempt == 2 or isinstance(exc, redis.ResponseError):
                    return
                continue
            except BaseException:  # a nested handler's exit: a reply may be unread
                connection.disconnect()
                raise
            self._released = decode(replies[0]).ok
            self._error = None
            return


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


def install(current: Callable[[], HandOver | None]) -> None:
    """Chain a handler of SIGTERM, SIGHUP and SIGINT before the installed
    one, and register an ``atexit`` hook, each handing over ``current()``.
    Only the main thread may install handlers: elsewhere this does nothing
    (``before_worker_shutdown`` then does the job)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def at_exit() -> None:
        hand_over = current()
        if hand_over is not None:
            hand_over.at_exit()

    atexit.register(at_exit)
    _wake_main_thread_on_signals()
    for signum in HANDLED:
        previous = signal.getsignal(signum)
        if not callable(previous) or getattr(previous, "_cron_chained", False):
            continue

        def handler(received: int, frame: Any, previous: Any = previous) -> Any:
            hand_over = current()
            if hand_over is not None:
                hand_over.on_signal()
            return previous(received, frame)

        handler._cron_chained = True  # type: ignore[attr-defined]
        try:
            signal.signal(signum, handler)
        except (ValueError, OSError):  # not the main thread of the main interpreter
            return


def _hold(held: list[int], previous: dict[int, Any]) -> None:
    """Replace the handlers of the handled signals with one that only
    notes the signal in ``held`` (an append: no lock), recording in
    ``previous`` each handler as it is replaced."""

    def note(signum: int, frame: Any) -> None:
        held.append(signum)

    for signum in HANDLED:
        handler = signal.getsignal(signum)
        if handler is None:  # installed outside Python: leave it
            continue
        previous[signum] = handler
        signal.signal(signum, note)


def _restore(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`_hold` replaced, every one even if a
    signal's handler raises meanwhile (raised after)."""
    deferred: BaseException | None = None
    for signum, handler in previous.items():
        for _ in range(3):
            try:
                signal.signal(signum, handler)
                break
            except BaseException as exc:  # a signal between two handlers: dramatiq's exit
                deferred = deferred or exc
    if deferred is not None:
        raise deferred


#: Interrupts the main thread's wait (see :func:`_wake_main_thread_on_signals`).
WAKE = getattr(signal, "SIGRTMAX", 0) - 2


def _wake_main_thread_on_signals() -> None:
    """Have a handled signal interrupt the main thread at once, whichever
    thread the kernel delivered it to.

    The kernel gives a process's signal to any thread that does not block
    it.  CPython runs the Python-level handler on the main thread, at its
    next bytecode; if the signal went to another thread, a main thread
    blocked in ``time.sleep(1)`` (dramatiq's worker loop) runs it only when
    the sleep ends, up to a second late.  CPython's C-level handler writes
    the signal's number to the wakeup fd at once on whichever thread got
    it: a small thread reads it and sends the main thread ``WAKE``, whose
    no-op handler interrupts the sleep, and the pending handlers run.
    Nothing is done where there is no ``WAKE`` (no real-time signals),
    under gevent, or when the wakeup fd is someone else's (an event loop).
    """
    if WAKE <= 0 or not hasattr(signal, "pthread_kill") or _gevent_patched():
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        taken = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        taken = None
    if taken != -1:
        if taken is not None:
            signal.set_wakeup_fd(taken)
        reader.close()
        writer.close()
        return
    signal.signal(WAKE, _wake)
    main = threading.main_thread().ident
    assert main is not None
    relay = threading.Thread(target=_relay, args=(reader, writer, main), name="dramatiq-cron-signals", daemon=True)
    relay.start()


def _wake(signum: int, frame: Any) -> None:
    """``WAKE``'s handler: its delivery alone interrupts the main thread."""


def _relay(reader: socket.socket, writer: socket.socket, main: int) -> None:
    """Wake the main thread for every handled signal written to the wakeup
    fd (``writer``, kept open as long as the relay runs)."""
    handled = set(HANDLED)
    signal.pthread_sigmask(signal.SIG_BLOCK, handled)  # let the kernel pick another thread
    while True:
        try:
            data = reader.recv(256)
        except OSError:
            return
        if not data:
            return
        if handled.intersection(data):
            try:
                signal.pthread_kill(main, WAKE)
            except OSError:  # the main thread is gone
                return


def _gevent_patched() -> bool:
    """Whether gevent has monkey-patched sockets in this process."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("socket"))
