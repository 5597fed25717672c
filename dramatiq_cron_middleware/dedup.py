"""Worker-side deduplication of cron messages, for brokers that deliver at
least once (RabbitMQ, SQS, Postgres...).

The scheduler decides each tick once (the fenced claim), but the broker
boundary around it is at-least-once: a publish retried after a lost
confirm, a redis-py retry of a non-idempotent push, an owed enqueue
retried by the scheduler, or a consumer that fetched a message another
one is already running.  Every copy carries the tick's deterministic
message id, so a worker can tell copies apart from new work: before
running a cron message it claims ``{prefix}:dedup:<message id>`` in the
scheduler's Redis, and skips the message if another delivery of the same
attempt already holds it.
"""

from __future__ import annotations

import logging
import threading

import dramatiq
from dramatiq import Broker, Middleware, Worker
from dramatiq.logging import get_logger
from dramatiq.middleware import SkipMessage

from .errors import CronConfigurationError, is_int
from .leader.reports import Episode
from .middleware import CronMiddleware, find_middleware
from .store.connection import close_clients, redact
from .store.dedup_marks import DedupMarks

__all__ = ["DEFAULT_QUEUE_WAIT", "CronDeduplication"]

#: How long a cron message is assumed to wait in a queue at most when its
#: schedule sets no ``max_age`` (which ``AgeLimit`` would enforce).
DEFAULT_QUEUE_WAIT = 3_600_000

# dramatiq's worker logs every SkipMessage at WARNING ("Message ... was
# skipped.").  For the duplicates skipped here that would be a warning per
# duplicate; this filter on the worker's logger drops exactly those records
# (the proxy the current thread just skipped), and the middleware logs its
# own line instead.
_WORKER_LOGGER = "dramatiq.worker.WorkerThread"
_skipping = threading.local()
_filter_lock = threading.Lock()


class _DuplicateSkipFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        skipped = getattr(_skipping, "message", None)
        if skipped is None or not isinstance(record.args, tuple) or not record.args:
            return True
        return record.args[0] is not skipped


_FILTER = _DuplicateSkipFilter()


def _install_filter() -> None:
    logger = logging.getLogger(_WORKER_LOGGER)
    with _filter_lock:
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


class CronDeduplication(Middleware):
    """Runs each attempt of a cron message once, however often the broker
    delivers it.

    Add it on the worker side, beside ``CronMiddleware``; it is opt-in, for
    brokers whose enqueue and delivery are at-least-once (RabbitMQ, SQS,
    Postgres...), and works on any broker.
    Cron messages (those with a ``cron_tick`` option, manual triggers
    included) cost one Redis round trip each before they run; other
    messages cost nothing.  The mark lives in the ``CronMiddleware``'s Redis
    under its prefix.

    * A duplicate delivery is skipped (``SkipMessage``: acked, not run), with
      a DEBUG line (INFO for a process's first).
    * A retry by ``Retries`` runs: it is a new attempt (the message's
      ``retries`` option grew), and the mark records the attempt it is for.
      A duplicate of an attempt that was already claimed is skipped, even
      after a later attempt ran.
    * Redis unreachable: the message runs unchecked (fail open: the
      broker's at-least-once, never a lost run), with one WARNING when the
      claims start failing and one when they work again.
    * A worker killed while running a message: the broker's redelivery of
      it is a duplicate of a claimed attempt and is skipped, so that run is
      lost (at most once per attempt, like a process dying between claim
      and enqueue on the scheduler side).

    Parameters:
      ttl(int): How long, in milliseconds, a claimed message id is
        remembered; a copy delivered later than that after the claim runs
        again.  It must cover the catch-up window (the scheduler may
        enqueue a tick again until then) plus the time a message may wait
        in the queue.  Defaults to None, meaning the longest
        ``catch_up_window + max_age`` over the ``CronMiddleware``'s
        schedules, counting one hour (``DEFAULT_QUEUE_WAIT``) for a
        schedule without ``max_age``: 3900000 (65 minutes) with the
        defaults.
    """

    def __init__(self, *, ttl: int | None = None) -> None:
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        if ttl is not None and not is_int(ttl, 1000):
            raise CronConfigurationError(
                f"CronDeduplication: ttl must be None or an int of at least 1000 ms, got {ttl!r}"
            )
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cron: CronMiddleware | None = None
        self._marks: DedupMarks | None = None
        self._threads = 8
        self._failing: Episode[str] = Episode()
        self._reported_duplicate = False

    # -- configuration --------------------------------------------------------

    def before_worker_boot(self, broker: Broker, worker: Worker) -> None:
        """Find the ``CronMiddleware`` (failing the boot without one) and
        size the connection pool to the worker's threads."""
        self._cron_middleware(broker)
        self._threads = max(self._threads, int(getattr(worker, "worker_threads", 8)))

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        """Close the marks' connections (the client reconnects if used again)."""
        marks = self._marks
        if marks is not None:
            close_clients([marks.client])

    def _cron_middleware(self, broker: Broker) -> CronMiddleware:
        if self._cron is None:
            # Its marks live in the CronMiddleware's Redis, under its prefix.
            self._cron = find_middleware(broker, needed_by="CronDeduplication")
        return self._cron

    def effective_ttl(self, broker: Broker) -> int:
        """The mark's TTL in ms: ``ttl`` when given, else derived from the
        ``CronMiddleware``'s schedules (see the class docstring)."""
        if self.ttl is not None:
            return self.ttl
        cron = self._cron_middleware(broker)
        spans = [
            s.catch_up_window + (DEFAULT_QUEUE_WAIT if s.max_age is None else s.max_age) for s in cron.all_schedules()
        ]
        return max(spans, default=cron.catch_up_window + DEFAULT_QUEUE_WAIT)

    # -- the hook -------------------------------------------------------------

    def before_process_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Claim a cron message's attempt; skip the message if another
        delivery holds it."""
        options = message.options
        if "cron_tick" not in options or message.failed:
            return
        attempt = options.get("retries", 0)
        if not is_int(attempt, 0):
            attempt = 0
        try:
            claimed = self._marks_of(broker).claim(message.message_id, attempt)
        except Exception as exc:  # Redis down, a bad URL...: run it unchecked
            self._report_failure(exc)
            return
        if self._failing.recovered() is not None:
            self.logger.warning("Cron deduplication works again.")
        if claimed:
            return
        self._skip_duplicate(message, attempt)

    def after_skip_message(self, broker: Broker, message: dramatiq.broker.MessageProxy) -> None:
        """Forget the duplicate this thread just skipped (see the log filter)."""
        if getattr(_skipping, "message", None) is message:
            _skipping.message = None

    def _skip_duplicate(self, message: dramatiq.broker.MessageProxy, attempt: int) -> None:
        # The running mark of an overlap="skip" schedule names the message
        # id, which the duplicate shares with the delivery that runs: the
        # CronMiddleware must not clear it when the duplicate is skipped.
        message.options.pop("cron_overlap", None)
        with self._lock:
            first, self._reported_duplicate = not self._reported_duplicate, True
        level = logging.INFO if first else logging.DEBUG
        self.logger.log(
            level,
            "Skipped a duplicate delivery of cron message %s (%s, tick %s, attempt %d): another delivery claimed it.%s",
            message.message_id,
            message.actor_name,
            message.options.get("cron_tick"),
            attempt,
            " Further duplicates are logged at DEBUG." if first else "",
        )
        _install_filter()
        _skipping.message = message
        raise SkipMessage(f"duplicate delivery of cron message {message.message_id}")

    # -- Redis ----------------------------------------------------------------

    def _marks_of(self, broker: Broker) -> DedupMarks:
        with self._lock:
            if self._marks is None:
                cron = self._cron_middleware(broker)
                # The CronMiddleware's Redis, so the marks sit beside its ledger;
                # a pool that waits for a free connection: every worker thread may claim at once.
                client = cron.connections(broker).for_workers(cron.timing.op_timeout_ms, threads=self._threads)
                self._marks = DedupMarks(client, cron.keys, ttl_ms=self.effective_ttl(broker))
            return self._marks

    def _report_failure(self, exc: Exception) -> None:
        if self._failing.failing("unreachable"):
            self.logger.warning(
                "Cannot claim cron messages for deduplication (%s); running them unchecked, "
                "so a duplicate delivery may run twice, until Redis answers again.",
                redact(f"{type(exc).__name__}: {exc}"),
            )
        else:
            self.logger.debug("Cron deduplication still failing: %s", redact(f"{type(exc).__name__}: {exc}"))
