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
the handler never waits for a lock and calls nothing that does (no
``threading.Event``, no connection pool, no logging): it sets plain flags,
wakes the leader thread through its :class:`~.stop_request.StopRequest`,
and sends one pipeline (the compare-and-delete release and a push that
ends the leader thread's blocking wait) on a connection made for it
beforehand.  A nested handler finds the hand-over begun and only chains on.

The handlers, the ``atexit`` hook and the relay thread are installed once
per process and serve every live hand-over, held weakly (a stopped
middleware is collectable); they act only in the process that installed
them: a forked child disarms every inherited hand-over and never writes on
its parent's socket.  Each release gives up after ``Timing.HAND_OVER_MS``
whatever the lease, with one WARNING.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import redis

from .store.codes import decode
from .store.connection import redact
from .store.timing import Timing

if TYPE_CHECKING:
    from .leader.thread import LeaderThread

__all__ = ["HandOver", "hand_over_all", "install", "live", "register"]

#: The signals whose handlers the hand-over chains.
HANDLED = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP", "SIGINT")) if s is not None)


class HandOver:
    """Releases one leader thread's lease at shutdown, at most once, and
    only in the process that made it.  The leader thread reports the
    outcome as it stops (``atexit`` does if it never gets the chance).

    The release is bounded by :data:`~.store.timing.Timing.HAND_OVER_MS`
    from the moment it begins, whatever the lease: a Redis that does not
    answer makes it give up (once), and nothing on the shutdown path
    waits for that Redis again.

    Parameters:
      leader: The leader thread.
      connection: A redis-py connection of the hand-over's own (see
        ``store.connection.dedicated_connection``), or None to leave the release to the
        leader thread and the lease's expiry.
    """

    def __init__(self, *, leader: LeaderThread[Any], connection: Any) -> None:
        self.leader = leader
        self.connection = connection
        #: The process that made it: a forked child inherits the object and
        #: its socket, and must never act for its parent.
        self.pid = os.getpid()
        #: Taken (never waited for) by whoever begins the hand-over: a
        #: signal handler, ``atexit``, or the stop path; once.
        self._claim = threading.Lock()
        self._begun = False
        #: The release's reply was read: True released, False not ours.
        self._released: bool | None = None
        #: The release could not be sent or answered within the bound.
        self._failed = False
        self._attempts = 0
        self._deadline = 0.0
        self._epoch: int | None = None
        #: Whether Redis may hold the lease under this process's token: it
        #: leads, or an acquisition's reply is unread (it may have won).
        self._may_hold = False
        self._error: str | None = None
        self._reported = False
        #: The release, read before the leader thread is told to stop.
        self._commands: list[tuple[Any, ...]] | None = None

    @property
    def failed(self) -> bool:
        """Whether the release gave up (Redis did not answer in time, or
        refused): nothing on the shutdown path should wait for Redis again."""
        return self._failed

    def may_begin(self) -> bool:
        """Whether :meth:`begin` may still succeed (signal safe: reads)."""
        return not self._begun and os.getpid() == self.pid

    def begin(self) -> bool:
        """Begin the hand-over: read the release, stop the leader thread.
        True for the one caller that began it (in the process that made
        it); signal safe: a lock taken without waiting, assignments and
        :meth:`~.leader.thread.LeaderThread.request_stop`."""
        if os.getpid() != self.pid or not self._claim.acquire(blocking=False):
            return False
        self._begun = True
        self._deadline = time.monotonic() + Timing.HAND_OVER_MS / 1000
        self._take_token()
        self.leader.request_stop()
        return True

    def run(self) -> None:
        """The stop path's part (a plain thread, not a signal handler):
        begin and send, unless someone already began."""
        if not self.begin():
            return
        if self.connection is None:  # none could be made: at least end the thread's blocking wait
            try:
                self.leader.lease.wake_self()
            except (redis.RedisError, OSError):
                pass
            return
        self.send()

    def at_exit(self) -> None:
        """The ``atexit`` part: release if no handler finished doing so (an
        exit may interrupt one half-way), and report it unless the leader
        thread did."""
        if os.getpid() != self.pid:
            return
        self.begin()
        if self._released is None and not self._failed:
            self.send()
        if self.claim_report(wait=0.0):
            self.leader.logger.info("Released cron leadership (epoch %s).", self._epoch)
        else:
            self.report_failure()

    def claim_report(self, *, wait: float) -> bool:
        """True, once, when this hand-over released the lease, waiting up to
        ``wait`` seconds (never past its bound) for one under way (never
        from a signal handler: the caller logs)."""
        self.wait(wait)
        if not self._released or self._reported:
            return False
        self._reported = True
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a release under way to be
        answered or given up, never past the end of the last attempt it may
        start (one begun just before the bound: a connect and a read);
        False if it is still under way (sent by a thread that got no CPU)."""
        last = self._deadline + 2 * Timing.HAND_OVER_ATTEMPT_MS / 1000
        deadline = min(time.monotonic() + timeout, last)
        while self._pending() and time.monotonic() < deadline:
            time.sleep(0.002)
        return not self._pending()

    def report_failure(self) -> bool:
        """Log, once, the WARNING that the release gave up (when Redis may
        hold the lease under this process's token); True if this call
        logged it."""
        if not self._failed or self._reported or not self._may_hold:
            return False
        self._reported = True
        self.leader.logger.warning(
            "Gave up releasing the cron lease (%s) at shutdown (%s; the hand-over waits %d ms at most); "
            "it expires within %d ms.",
            "an acquisition whose reply was not read yet" if self._epoch is None else f"epoch {self._epoch}",
            self._error or "not sent",
            Timing.HAND_OVER_MS,
            self.leader.timing.lease_ms,
        )
        return True

    def close(self) -> None:
        """Retire the hand-over (the leader thread was stopped and released
        the plain way) and close its connection (in this process only)."""
        self._claim.acquire(blocking=False)
        self._begun = True
        _forget(self)
        if self.connection is not None and os.getpid() == self.pid:
            self.connection.disconnect()

    def disarm(self) -> None:
        """In a forked child: never act, and let go of the parent's
        connection without a word on it."""
        self._claim.acquire(blocking=False)
        self._begun = True
        self.connection = None

    def _pending(self) -> bool:
        return self._begun and self.connection is not None and self._released is None and not self._failed

    def _take_token(self) -> None:
        """Read the release (its token) and the epoch now: once told to
        stop, the leader thread releases too, and drops its token as it
        sends; an exit may end that thread before its release is sent."""
        if self._commands is None:
            self._epoch = self.leader.epoch
            self._may_hold = self._epoch is not None or self.leader.lease.release_token is not None
            self._commands = self.leader.lease.hand_over_commands()

    def send(self) -> None:
        """Send the release and read its reply, retrying a failed attempt
        while within the bound (signal safe: no lock, no logging)."""
        connection = self.connection
        commands = self._commands
        if connection is None or commands is None or os.getpid() != self.pid:
            return
        while self._released is None and not self._failed:
            if self._attempts >= 3 or (self._attempts and time.monotonic() >= self._deadline):
                self._failed = True
                return
            self._attempts += 1
            try:
                connection.send_packed_command(connection.pack_commands(commands))
                replies = [connection.read_response() for _ in commands]
            except (redis.RedisError, OSError) as exc:
                connection.disconnect()
                self._error = redact(f"{type(exc).__name__}: {exc}")
                if isinstance(exc, redis.ResponseError):
                    self._failed = True
                continue
            except BaseException:  # a nested handler's exit: a reply may be unread
                connection.disconnect()
                raise
            self._released = decode(replies[0]).ok
            self._error = None


# -- the process-wide part: installed once per process --------------------------
#
# The handlers, the ``atexit`` hook and the relay thread serve every live
# hand-over of the process (one per running leader thread, whichever
# middleware made it), referred to weakly: a stopped middleware and all it
# holds can be collected.  ``_live`` is a tuple replaced whole under
# ``_LOCK`` (by registration, never by a handler), so a handler reads it
# in one step without a lock.

_LOCK = threading.Lock()
_live: tuple[weakref.ref[HandOver], ...] = ()
#: The process whose handlers and hook act (None before the first install).
_installed_pid: int | None = None
#: Per signal, the handler ours chains to.
_previous: dict[int, Any] = {}
#: The relay's socket pair and the wakeup fd it reads (see
#: :func:`_wake_main_thread_on_signals`), to let go of in a forked child.
_relay_pair: tuple[socket.socket, socket.socket] | None = None


def register(hand_over: HandOver) -> HandOver:
    """Have the installed handlers and ``atexit`` hook serve ``hand_over``
    (weakly: it stays collectable) until it is closed; returns it."""
    global _live
    with _LOCK:
        _live = (*(r for r in _live if r() is not None), weakref.ref(hand_over))
    return hand_over


def _forget(hand_over: HandOver) -> None:
    global _live
    with _LOCK:
        _live = tuple(r for r in _live if r() is not None and r() is not hand_over)


def live() -> list[HandOver]:
    """The hand-overs the handlers serve now (one read: signal safe)."""
    return [h for h in (r() for r in _live) if h is not None]


def install() -> None:
    """Chain a handler of SIGTERM, SIGHUP and SIGINT before the installed
    one, register an ``atexit`` hook and start the relay thread, once per
    process; each hands over every :func:`register`-ed hand-over.  Only
    the main thread may install handlers: elsewhere this does nothing
    (``before_worker_shutdown`` then does the job)."""
    global _installed_pid
    if threading.current_thread() is not threading.main_thread():
        return
    with _LOCK:
        first = _installed_pid is None
        again = _installed_pid == os.getpid()
        _installed_pid = os.getpid()
    if first:  # a forked child inherits the hook and the fork handler
        atexit.register(_at_exit)
        os.register_at_fork(after_in_child=_after_fork_in_child)
    if not again:
        _wake_main_thread_on_signals()
    # Every time: someone may have replaced a handler since.
    for signum in HANDLED:
        previous = signal.getsignal(signum)
        if not callable(previous) or getattr(previous, "_cron_chained", False):
            continue
        _previous[signum] = previous
        try:
            signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main thread of the main interpreter
            return


def _on_signal(received: int, frame: Any) -> Any:
    """The chained handler: hand over in the process that installed it,
    then pass the signal on."""
    if os.getpid() == _installed_pid:
        hand_over_all(live())
    return _previous[received](received, frame)


_on_signal._cron_chained = True  # type: ignore[attr-defined]


def hand_over_all(hand_overs: list[HandOver]) -> None:
    """The signal handler's part: stop every leader thread and release
    its lease.  Takes no lock and never waits for one."""
    if not any(h.may_begin() for h in hand_overs):
        return
    if _gevent_patched():
        # Under gevent a handler runs in the hub, where a socket cannot
        # block: release from greenlets, which run once it returns.
        import gevent  # type: ignore[import-untyped]

        for hand_over in hand_overs:
            if hand_over.begin():
                gevent.spawn(hand_over.send)
        return
    # A nested signal runs dramatiq's handler, whose second call raises
    # SystemExit out of whatever this frame is waiting in; in a storm,
    # again at every retry.  In a forked worker no atexit hook runs
    # after that (multiprocessing ends the child with os._exit).  So
    # the signals that come meanwhile are held until the releases are
    # answered (or given up), then delivered (once each, as the kernel
    # coalesces them); an exit that came before they were held is deferred.
    # The hand-overs begin only once the signals are held: one begun
    # before would leave a nested signal nothing to do but chain on to
    # that exit, which then cut this frame short before anything was
    # sent.  A nested signal that comes while they are being held begins
    # (and sends) them itself.
    held: list[int] = []
    deferred: BaseException | None = None
    previous: dict[int, Any] = {}
    try:
        _hold(held, previous)
    except BaseException as exc:
        deferred = exc
    try:
        begun = [h for h in hand_overs if h.begin()]
        for hand_over in begun:
            for _ in range(3):
                try:
                    hand_over.send()
                    break
                except BaseException as exc:
                    deferred = deferred or exc
    finally:
        _restore(previous)
    if deferred is not None:
        raise deferred
    for signum in dict.fromkeys(held):
        signal.raise_signal(signum)


def _at_exit() -> None:
    if os.getpid() != _installed_pid:
        return
    for hand_over in live():
        hand_over.at_exit()


def _after_fork_in_child() -> None:
    """A forked child (a ``multiprocessing`` pool, say) inherits the
    handlers, the hand-overs and their sockets: disarm them all, so the
    child never releases its parent's lease, and stop relaying its
    signals to the parent's relay thread."""
    global _live, _relay_pair
    for hand_over in live():
        hand_over.disarm()
    _live = ()
    pair, _relay_pair = _relay_pair, None
    if pair is not None:
        try:
            taken = signal.set_wakeup_fd(-1)
            if taken != pair[1].fileno():
                signal.set_wakeup_fd(taken)  # someone else's: put it back
        except (ValueError, OSError):
            pass
        for sock in pair:
            sock.close()  # the child's copies only: a close never shuts the parent's down


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
    global _relay_pair
    _relay_pair = (reader, writer)
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
