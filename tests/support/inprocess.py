"""A scheduler running inside the test process: a StubBroker with a
CronMiddleware on a real redis-server, and a record of every enqueue.

For behaviour that needs a real Redis but not real worker processes (the
leader thread is the same code either way), this is much faster than
starting ``dramatiq`` instances.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dramatiq
from dramatiq import Middleware
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import CronMiddleware
from dramatiq_cron_middleware.store.keys import Keys

__all__ = ["InProcessApp", "in_process_app"]


class _Recorder(Middleware):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[tuple[str, str, str]] = []  # (actor, cron_tick, message id)

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        with self.lock:
            self.sent.append((message.actor_name, message.options.get("cron_tick", ""), message.message_id))


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class InProcessApp:
    """What a test sees of the in-process scheduler."""

    def __init__(self, broker: StubBroker, middleware: CronMiddleware, recorder: _Recorder, log: _Capture) -> None:
        self.broker = broker
        self.middleware = middleware
        self.keys: Keys = middleware.keys
        self._recorder = recorder
        self._log = log

    @property
    def leader(self) -> Any:
        assert self.middleware.leader is not None
        return self.middleware.leader

    def sent(self, actor: str | None = None) -> list[tuple[str, str, str]]:
        """Every (actor, cron_tick, message id) enqueued so far."""
        with self._recorder.lock:
            if actor is None:
                return list(self._recorder.sent)
            return [s for s in self._recorder.sent if s[0] == actor]

    def duplicates(self) -> list[tuple[str, str]]:
        """(actor, tick) pairs enqueued more than once."""
        counts = Counter((a, t) for a, t, _ in self.sent())
        return [key for key, n in counts.items() if n > 1]

    def warnings(self, containing: str = "") -> list[str]:
        """WARNING (and worse) lines the scheduler logged."""
        return [
            r.getMessage() for r in self._log.records if r.levelno >= logging.WARNING and containing in r.getMessage()
        ]

    def errors(self) -> list[str]:
        """ERROR (and worse) lines, and lines logged with a traceback."""
        return [r.getMessage() for r in self._log.records if r.levelno >= logging.ERROR or r.exc_info]

    def records(self) -> list[logging.LogRecord]:
        """Every record the scheduler logged, in order."""
        return list(self._log.records)

    def logged(self, containing: str) -> list[str]:
        return [r.getMessage() for r in self._log.records if containing in r.getMessage()]


@contextmanager
def in_process_app(
    redis_url: str | None,
    crons: Mapping[str, Any],
    *,
    lock_ttl: int = 2000,
    start: bool = True,
    broker: Any = None,
    **options: Any,
) -> Iterator[InProcessApp]:
    """A broker (a StubBroker unless given) with one actor per entry of
    ``crons`` (actor name -> ``cron=`` value) and the scheduler started on
    ``redis_url`` (None: the broker's own Redis)."""
    broker = broker if broker is not None else StubBroker()
    middleware = CronMiddleware(redis=redis_url, lock_ttl=lock_ttl, **options)
    broker.add_middleware(middleware)
    recorder = _Recorder()
    broker.add_middleware(recorder)
    for name, spec in crons.items():
        dramatiq.actor(lambda: None, actor_name=name, broker=broker, cron=spec)
    capture = _Capture()
    logger = logging.getLogger("dramatiq_cron_middleware")
    logger.addHandler(capture)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    app = InProcessApp(broker, middleware, recorder, capture)
    try:
        if start:
            middleware.start(broker)
        yield app
    finally:
        middleware.stop()
        broker.close()
        logger.removeHandler(capture)
        logger.setLevel(previous)
