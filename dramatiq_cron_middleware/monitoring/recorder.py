"""The worker side of run monitoring: a record of every cron message's run.

The middleware's hooks call :class:`RunRecorder` for messages that carry a
``cron_tick`` option only (other messages cost nothing): one script at
start (host, pid, Redis time, attempt) and one at finish (outcome, error),
each one round trip, each also appending the event the leader decides
health from.  The finish is written when the message is acknowledged or
rejected: dramatiq calls ``after_process_message`` hooks in reverse order,
so ``Retries`` decides whether a failure is retried only after this
middleware's hook ran.

While a run is running, a heartbeat thread (one per process, alive only
while a cron message runs in it) tells Redis every ``ALIVE_MS / 4`` that
this process still runs it: the leader marks a run past ``max_runtime``
``lost`` only once that heartbeat lapsed (the worker is gone).

Records are written with a timeout of their own (:data:`RECORD_TIMEOUT_MS`,
at least the scheduler's operation timeout: a short lease must not make a
loaded worker drop them) and retried once after a timeout; the scripts
write nothing twice.  It fails open: a Redis that does not answer loses the
record, never touches the job or its result, and is reported with one
WARNING per episode; its end is logged with the count of records lost
(:attr:`RunRecorder.lost`).  While Redis fails, one record a second tries
it; the others are dropped at once, so a hung Redis delays at most one
message a second by the timeout, not every one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from dramatiq.broker import MessageProxy

from ..leader.reports import Episode
from ..schedules.instants import instant_ms
from ..store.abc import RunStore
from ..store.connection import redact
from ..store.runs import ALIVE_MS

__all__ = ["ERROR_LENGTH", "RECORD_TIMEOUT_MS", "RunRecorder", "RunSink", "describe_error", "tick_of"]

#: A failed run's error is cut to about this many characters.
ERROR_LENGTH = 500
#: The least time a run record's write may take, ms: a worker under CPU
#: load answers late, and a short lease's operation timeout (333 ms at 2 s)
#: dropped records that Redis had in fact written.
RECORD_TIMEOUT_MS = 2000


class RunSink(Protocol):
    """Where the middleware's hooks report runs: see :class:`RunRecorder`."""

    def started(self, message: MessageProxy) -> None: ...

    def processed(self, message: MessageProxy, error: BaseException | None) -> None: ...

    def settled(self, message: MessageProxy, *, rejected: bool) -> None: ...

    def dropped(self, message: MessageProxy) -> None: ...


@dataclasses.dataclass
class _Delivery:
    """One delivery of a message, from its start to its settling."""

    token: str
    attempt: int
    error: BaseException | None = None
    processed: bool = False
    #: The run this delivery started, beaten for until it settles.
    running: tuple[str, int] | None = None


class RunRecorder:
    """Writes run records from the worker threads.

    Parameters:
      runs_factory: Builds the storage (a short-timeout client) on first
        use: a worker that never runs a cron message never connects.
      logger: Where a failing Redis is reported, once per episode.
      retry_after: Seconds after a failure during which records are dropped
        without trying.  Defaults to 1.0.
      monotonic: The clock of ``retry_after``.
      beat: Seconds between two heartbeats of the runs this process runs.
        Defaults to a quarter of ``runs.ALIVE_MS``.
    """

    def __init__(
        self,
        *,
        runs_factory: Callable[[], RunStore],
        logger: logging.Logger,
        retry_after: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        beat: float = ALIVE_MS / 4000,
    ) -> None:
        self.logger = logger
        self.retry_after = retry_after
        self.monotonic = monotonic
        self._failed_at: float | None = None
        self._factory = runs_factory
        self._lock = threading.Lock()
        self._runs: RunStore | None = None
        self._failing: Episode[str] = Episode()
        self._host = socket.gethostname()
        #: Records lost (Redis failed) since this recorder was made.
        self.lost = 0
        self._lost_at_start = 0
        self.beat = beat
        # The runs this process runs (member -> deliveries), beaten for.
        self._running: dict[str, int] = {}
        self._beating: threading.Thread | None = None
        self._stop = threading.Event()
        # A worker thread runs one message at a time, start to settling:
        # the delivery waits here between the hooks.
        self._local = threading.local()

    def started(self, message: MessageProxy) -> None:
        """A cron message starts running (its attempt is ``retries + 1``)."""
        found = _identify(message)
        if found is None:
            return
        delivery = _new_delivery(message)
        delivery.running = found
        self._deliveries()[message.message_id] = delivery
        self._alive(found, +1)
        self._record("start", found, delivery, "")

    def processed(self, message: MessageProxy, error: BaseException | None) -> None:
        """The actor returned or raised."""
        delivery = self._deliveries().get(message.message_id)
        if delivery is not None:
            delivery.error = error
            delivery.processed = True

    def settled(self, message: MessageProxy, *, rejected: bool) -> None:
        """The message was acknowledged (succeeded, or failed and requeued
        for a retry) or rejected (failed for good): record the finish."""
        delivery = self._pop(message)
        if delivery is None or not delivery.processed:
            return
        if rejected:
            outcome = "failed"
        else:
            outcome = "succeeded" if delivery.error is None else "retrying"
        self._finish(message, outcome, delivery)

    def dropped(self, message: MessageProxy) -> None:
        """The message was skipped (``AgeLimit``, a duplicate): it will not run."""
        delivery = self._pop(message)
        self._finish(message, "dropped", delivery or _new_delivery(message))

    def _pop(self, message: MessageProxy) -> _Delivery | None:
        delivery = self._deliveries().pop(message.message_id, None)
        if delivery is not None and delivery.running is not None:
            self._alive(delivery.running, -1)
        return delivery

    def _finish(self, message: MessageProxy, outcome: str, delivery: _Delivery) -> None:
        found = _identify(message)
        if found is not None:
            error = delivery.error
            self._record("finish", found, delivery, outcome, describe_error(error) if error is not None else "")

    def _deliveries(self) -> dict[str, _Delivery]:
        found: dict[str, _Delivery] | None = getattr(self._local, "deliveries", None)
        if found is None:
            found = self._local.deliveries = {}
        return found

    def _record(self, mode: str, run: tuple[str, int], delivery: _Delivery, outcome: str, error: str = "") -> None:
        schedule_id, tick = run
        failed_at = self._failed_at
        if failed_at is not None and self.monotonic() - failed_at < self.retry_after:
            self.lost += 1
            return  # Redis failed a moment ago: lost at once, not after a timeout
        try:
            self._get_runs().record_run(
                mode,
                schedule_id,
                tick,
                attempt=delivery.attempt,
                token=delivery.token,
                host=self._host,
                pid=os.getpid(),
                outcome=outcome,
                error=error,
            )
        except Exception as exc:  # Redis down, a bad URL...: never fail the message
            self._failed_at = self.monotonic()
            self.lost += 1
            if self._failing.failing("unreachable"):
                self._lost_at_start = self.lost - 1
                self.logger.warning(
                    "Could not record the %s of a run of %s (%s); run records are lost until Redis answers "
                    "again, the jobs run as usual.",
                    mode,
                    schedule_id,
                    redact(f"{type(exc).__name__}: {exc}"),
                )
            return
        self._failed_at = None
        if self._failing.recovered() is not None:
            # INFO: the episode's one WARNING was its start (every worker
            # process has one; a Redis outage should not double them all).
            self.logger.info(
                "Recording runs works again; %d run record(s) were lost meanwhile (%d since the worker started).",
                self.lost - self._lost_at_start,
                self.lost,
            )

    # -- the heartbeat -----------------------------------------------------

    def _alive(self, run: tuple[str, int], change: int) -> None:
        schedule_id, tick = run
        member = f"r|{tick}|{schedule_id}"
        with self._lock:
            count = self._running.get(member, 0) + change
            if count > 0:
                self._running[member] = count
            else:
                self._running.pop(member, None)
            if self._running and self._beating is None and not self._stop.is_set():
                self._beating = threading.Thread(target=self._beat, name="cron-run-heartbeat", daemon=True)
                self._beating.start()

    def _beat(self) -> None:
        """Beat for the running runs; ends when none runs (a worker that runs
        no cron message has no such thread)."""
        while not self._stop.wait(self.beat):
            with self._lock:
                members = list(self._running)
                if not members:
                    self._beating = None
                    return
            try:
                self._get_runs().keep_alive(members)
            except Exception:  # the records' own episode reports a failing Redis
                pass
        with self._lock:
            self._beating = None

    def close(self) -> None:
        """Stop the heartbeat (the worker stops)."""
        self._stop.set()
        with self._lock:
            beating = self._beating
        if beating is not None:
            beating.join(1.0)

    def _get_runs(self) -> RunStore:
        with self._lock:
            if self._runs is None:
                self._runs = self._factory()
            return self._runs


def tick_of(message: MessageProxy) -> int | None:
    """The tick (epoch ms) of a cron message, from its ``cron_tick``; None
    for any other message."""
    tick = message.options.get("cron_tick")
    if not isinstance(tick, str):
        return None
    try:
        return instant_ms(tick)
    except ValueError:
        return None


def describe_error(error: BaseException) -> str:
    """``Type: message``, credentials in URLs redacted, cut to about
    :data:`ERROR_LENGTH` characters."""
    text = redact(f"{type(error).__name__}: {error}")
    return text if len(text) <= ERROR_LENGTH else text[: ERROR_LENGTH - 3] + "..."


def _new_delivery(message: MessageProxy) -> _Delivery:
    return _Delivery(uuid.uuid4().hex, int(message.options.get("retries", 0) or 0) + 1)


def _identify(message: MessageProxy) -> tuple[str, int] | None:
    schedule_id = message.options.get("cron_schedule")
    tick = tick_of(message)
    if not isinstance(schedule_id, str) or tick is None:
        return None
    return schedule_id, tick
