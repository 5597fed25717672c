"""The worker side of run monitoring: every cron message's run, tracked
once and told to each sink.

The middleware's message hooks call :class:`RunRecorder` once each, for
messages that carry a ``cron_tick`` option only (other messages cost
nothing).  It keeps the one delivery per worker thread (its start, attempt
and error) and tells every sink what became of it: :meth:`RunSink.started`
when the message starts, :meth:`RunSink.finished` when it is acknowledged
or rejected (dramatiq calls ``after_process_message`` hooks in reverse
order, so ``Retries`` decides whether a failure is retried only after this
middleware's hook ran) or skipped.  A failed attempt's retry may start on
another thread before that attempt is acknowledged (``Retries`` enqueues it
first): the retry's start then tells the failed attempt's finish first, so
each sink is told a message's attempts in order.  The sinks are the run record in the
store (:class:`StoreSink`), and those ``CronMetrics`` and ``SentryCrons``
add.

Each sink has a queue and a thread of its own (:class:`_Lane`), as each
alert sink has its own outbox: a sink that is slow or raises delays and
loses nothing of the others, nor the message (its hooks only queue).  A
full queue (:data:`LANE_LENGTH`) or a failing sink is reported once per
episode and counted in :attr:`RunRecorder.lost`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from dramatiq.broker import MessageProxy

from ..leader.reports import Episode
from ..schedules.instants import instant_ms
from ..store.abc import RunStore
from ..store.connection import redact
from ..store.runs import ALIVE_MS

__all__ = [
    "ERROR_LENGTH",
    "LANE_LENGTH",
    "RECORD_TIMEOUT_MS",
    "Run",
    "RunRecorder",
    "RunSink",
    "StoreSink",
    "describe_error",
    "tick_of",
]

#: A failed run's error is cut to about this many characters.
ERROR_LENGTH = 500
#: The least time a run record's write may take, ms: a worker under CPU
#: load answers late, and a short lease's operation timeout (333 ms at 2 s)
#: dropped records that Redis had in fact written.
RECORD_TIMEOUT_MS = 2000
#: Events a sink's queue holds at most; more are dropped (and counted).
LANE_LENGTH = 10_000
# Seconds a sink's idle thread waits for the next event before it ends.
_LINGER = 5.0


@dataclasses.dataclass(frozen=True)
class Run:
    """One delivery of a cron message, as the sinks are told it."""

    message_id: str
    schedule_id: str
    tick_ms: int
    #: The attempt: the message's ``retries`` plus one.
    attempt: int
    #: This delivery's identity (a duplicate delivery has another).
    token: str
    #: ``""`` at the start; then ``succeeded``, ``failed`` (for good),
    #: ``retrying`` (failed, and dramatiq retries it) or ``dropped``.
    outcome: str = ""
    error: BaseException | None = None
    #: At the finish, seconds from its start to the actor's return or
    #: raise (this process's monotonic clock); None: it did not start in
    #: this process (dropped before).
    duration_s: float | None = None


class RunSink(Protocol):
    """Where runs are told, on a thread of the sink's own."""

    #: Names the sink's thread and its WARNINGs.
    name: str

    def started(self, run: Run) -> None: ...

    def finished(self, run: Run) -> None: ...


@dataclasses.dataclass
class _Delivery:
    run: Run
    started_at: float | None = None
    processed: bool = False
    #: When the actor returned or raised (monotonic).
    ended_at: float | None = None


class RunRecorder:
    """Tracks each cron run once, from the worker threads, and tells every
    sink.

    Parameters:
      logger: Where a failing or overflowing sink is reported, once per
        episode.
      sinks: The sinks to start with; :meth:`add` adds more.
    """

    def __init__(self, *, logger: logging.Logger, sinks: Sequence[RunSink] = ()) -> None:
        self.logger = logger
        self._lock = threading.Lock()
        self._lanes: list[_Lane] = []
        # A worker thread runs one message at a time, start to settling:
        # the delivery waits here between the hooks.
        self._local = threading.local()
        # Failed attempts not yet settled, by message id: their retry may
        # start first, on another thread.  The lock orders a failed
        # attempt's finish before its retry's start in every lane.
        self._failed: dict[str, _Delivery] = {}
        self._order = threading.Lock()
        for sink in sinks:
            self.add(sink)

    @property
    def sinks(self) -> list[RunSink]:
        return [lane.sink for lane in self._lanes]

    @property
    def lost(self) -> int:
        """Events lost since this recorder was made: dropped from a full
        queue, or lost by their sink (a :class:`StoreSink` whose store failed)."""
        return sum(lane.lost + getattr(lane.sink, "lost", 0) for lane in self._lanes)

    def add(self, sink: RunSink) -> None:
        """Tell ``sink`` every run from now on (once, however often added)."""
        with self._lock:
            if all(lane.sink is not sink for lane in self._lanes):
                self._lanes = [*self._lanes, _Lane(sink, self.logger)]

    # -- the message hooks ---------------------------------------------------

    def started(self, message: MessageProxy) -> None:
        """A cron message starts running (its attempt is ``retries + 1``)."""
        run = _run_of(message)
        if run is None:
            return
        self._deliveries()[message.message_id] = _Delivery(run, started_at=time.monotonic())
        if run.attempt == 1:
            self._tell("started", run)
            return
        with self._order:
            before = self._failed.pop(message.message_id, None)
            if before is not None:  # enqueued again, so retried: its ack comes later and tells nothing
                self._finish(before, "retrying")
            self._tell("started", run)

    def processed(self, message: MessageProxy, error: BaseException | None) -> None:
        """The actor returned or raised."""
        delivery = self._deliveries().get(message.message_id)
        if delivery is not None:
            delivery.run = dataclasses.replace(delivery.run, error=error)
            delivery.processed = True
            delivery.ended_at = time.monotonic()
            if error is not None:
                with self._order:
                    self._failed[message.message_id] = delivery

    def settled(self, message: MessageProxy, *, rejected: bool) -> None:
        """The message was acknowledged (succeeded, or failed and requeued
        for a retry) or rejected (failed for good)."""
        delivery = self._deliveries().pop(message.message_id, None)
        if delivery is None or not delivery.processed:
            return
        if delivery.run.error is None:
            self._finish(delivery, "failed" if rejected else "succeeded")
            return
        with self._order:
            if self._failed.get(message.message_id) is not delivery:
                return  # its retry has started, and told this attempt's finish
            del self._failed[message.message_id]
            self._finish(delivery, "failed" if rejected else "retrying")

    def dropped(self, message: MessageProxy) -> None:
        """The message was skipped (``AgeLimit``, a duplicate): it will not run."""
        delivery = self._deliveries().pop(message.message_id, None)
        if delivery is None:
            run = _run_of(message)
            if run is None:
                return
            delivery = _Delivery(run)
        self._finish(delivery, "dropped")

    def _finish(self, delivery: _Delivery, outcome: str) -> None:
        end = time.monotonic() if delivery.ended_at is None else delivery.ended_at
        ran = None if delivery.started_at is None else end - delivery.started_at
        self._tell("finished", dataclasses.replace(delivery.run, outcome=outcome, duration_s=ran))

    def _tell(self, event: str, run: Run) -> None:
        for lane in self._lanes:
            lane.put(event, run)

    def _deliveries(self) -> dict[str, _Delivery]:
        found: dict[str, _Delivery] | None = getattr(self._local, "deliveries", None)
        if found is None:
            found = self._local.deliveries = {}
        return found

    # -- the end -------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every sink to have been told
        every run; whether they all were."""
        deadline = time.monotonic() + timeout
        return all([lane.flush(deadline) for lane in self._lanes])

    def close(self, timeout: float = 0.5) -> None:
        """The worker stops: tell the sinks what is queued (waiting up to
        ``timeout`` seconds; the rest is still told while the process
        lives), end each sink's thread once its queue is empty, and stop
        the heartbeat."""
        self.flush(timeout)
        for lane in self._lanes:
            lane.close()


class _Lane:
    """One sink's queue and thread: the sink is told the events in order;
    its thread ends when idle (a next event starts another)."""

    def __init__(self, sink: RunSink, logger: logging.Logger) -> None:
        self.sink = sink
        self.logger = logger
        self.lost = 0
        self._events: collections.deque[tuple[str, Run]] = collections.deque()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = False
        self._closing = False
        self._failing: Episode[str] = Episode()

    def put(self, event: str, run: Run) -> None:
        with self._changed:
            if len(self._events) >= LANE_LENGTH:
                self.lost += 1
                if self._failing.failing("full"):
                    self.logger.warning(
                        "Cron run %s: %d events wait, so the run events of %s and later ones are dropped until it "
                        "keeps up; the jobs run as usual.",
                        self.sink.name,
                        LANE_LENGTH,
                        run.schedule_id,
                    )
                return
            self._events.append((event, run))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"cron-runs-{self.sink.name}", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._events and not self._closing:
                    self._changed.wait(_LINGER)
                if not self._events:
                    self._thread = None
                    return
                event, run = self._events.popleft()
                self._busy = True
            try:
                getattr(self.sink, event)(run)
            except Exception as exc:  # a sink's fault is its own: the others go on
                if self._failing.failing(type(exc).__name__):
                    self.logger.warning(
                        "Cron run %s raised (%s); the other sinks and the jobs go on.",
                        self.sink.name,
                        redact(f"{type(exc).__name__}: {exc}"),
                    )
            else:
                if self._failing.recovered() is not None:
                    self.logger.info("Cron run %s works again.", self.sink.name)
            with self._changed:
                self._busy = False
                self._changed.notify_all()

    def flush(self, deadline: float) -> bool:
        with self._changed:
            while self._events or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        close = getattr(self.sink, "close", None)
        if close is not None:
            close()


class StoreSink:
    """The run record in the store: one script at start (host, pid, store
    time, attempt) and one at finish (outcome, error), each also appending
    the event the leader decides health from.

    While a run runs, a heartbeat thread (alive only while a cron message
    runs in this process) tells the store every ``beat`` seconds that this
    process still runs it: the leader marks a run past ``max_runtime``
    ``lost`` only once that heartbeat lapsed (the worker is gone).

    It fails open: a store that does not answer loses the record, never
    touches the job, and is reported with one WARNING per episode; its end
    is logged with the count of records lost (:attr:`lost`).  While the
    store fails, a record a second tries it; the others are lost at once.

    Parameters:
      store: The store to write to, asked at every record (None: none, as
        on a ``StubBroker`` without Redis).
      logger: Where a failing store is reported, once per episode.
      retry_after: Seconds after a failure during which records are lost
        without trying.  Defaults to 1.0.
      monotonic: The clock of ``retry_after``.
      beat: Seconds between two heartbeats.  Defaults to a quarter of
        ``runs.ALIVE_MS``.
    """

    name = "records"

    def __init__(
        self,
        *,
        store: Callable[[], RunStore | None],
        logger: logging.Logger,
        retry_after: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        beat: float = ALIVE_MS / 4000,
    ) -> None:
        self.store = store
        self.logger = logger
        self.retry_after = retry_after
        self.monotonic = monotonic
        self.beat = beat
        #: Records lost (the store failed) since this sink was made.
        self.lost = 0
        self._lost_at_start = 0
        self._failed_at: float | None = None
        self._failing: Episode[str] = Episode()
        self._host = socket.gethostname()
        self._lock = threading.Lock()
        # The runs this process runs (member -> deliveries), beaten for.
        self._running: dict[str, int] = {}
        self._beating: threading.Thread | None = None
        self._stop = threading.Event()

    def started(self, run: Run) -> None:
        self._alive(run, +1)
        self._record("start", run)

    def finished(self, run: Run) -> None:
        if run.duration_s is not None:  # it started here
            self._alive(run, -1)
        error = "" if run.error is None else describe_error(run.error)
        self._record("finish", run, error)

    def _record(self, mode: str, run: Run, error: str = "") -> None:
        failed_at = self._failed_at
        if failed_at is not None and self.monotonic() - failed_at < self.retry_after:
            self.lost += 1
            return  # the store failed a moment ago: lost at once, not after a timeout
        try:
            store = self.store()
            if store is None:
                return
            store.record_run(
                mode,
                run.schedule_id,
                run.tick_ms,
                attempt=run.attempt,
                token=run.token,
                host=self._host,
                pid=os.getpid(),
                outcome=run.outcome,
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
                    run.schedule_id,
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

    # -- the heartbeat -------------------------------------------------------

    def _alive(self, run: Run, change: int) -> None:
        member = f"r|{run.tick_ms}|{run.schedule_id}"
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
        """Beat for the running runs; ends when none runs."""
        while not self._stop.wait(self.beat):
            with self._lock:
                members = list(self._running)
                if not members:
                    self._beating = None
                    return
            try:
                store = self.store()
                if store is not None:
                    store.keep_alive(members)
            except Exception:  # the records' own episode reports a failing store
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


def _run_of(message: MessageProxy) -> Run | None:
    schedule_id = message.options.get("cron_schedule")
    tick = tick_of(message)
    if not isinstance(schedule_id, str) or tick is None:
        return None
    attempt = int(message.options.get("retries", 0) or 0) + 1
    return Run(message.message_id, schedule_id, tick, attempt, uuid.uuid4().hex)
