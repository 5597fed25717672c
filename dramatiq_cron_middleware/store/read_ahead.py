"""Reading ahead: Redis works on the next reply while this process works
on the current one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar, cast

__all__ = ["read_ahead"]

T = TypeVar("T")


def read_ahead(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """The items of ``items``, produced by a thread of their own up to
    ``depth`` ahead: with ``items`` a sequence of Redis calls (a scan's
    pages, a sync's script calls), Redis runs the next call and the socket
    waits for it while the caller processes the current reply (a takeover
    of a large runtime set).  An error producing an
    item is raised here, in its place; the thread ends with the iteration,
    also when the caller stops early."""
    ahead: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                ahead.put((True, item))
            ahead.put((False, None))
        except BaseException as exc:  # handed to the caller, which raises it
            ahead.put((False, exc))

    producer = threading.Thread(target=produce, name="dramatiq-cron-read-ahead", daemon=True)
    producer.start()
    try:
        while True:
            more, item = ahead.get()
            if not more:
                if isinstance(item, BaseException):
                    raise item
                return
            yield cast(T, item)
    finally:
        stop.set()
        while producer.is_alive():  # a producer waiting to put: take its item, let it see stop
            try:
                ahead.get(timeout=0.05)
            except queue.Empty:
                pass
        producer.join()
