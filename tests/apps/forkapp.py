"""tests/apps/cronapp.py plus an actor that forks: ``fork_pool`` (every
second) maps a little work over a fork-based ``multiprocessing.Pool`` of
two and leaves its ``with`` block, which terminates the pool (SIGTERM to
each child).  A child inherits the worker's signal handlers, its shutdown
hand-over and that hand-over's socket; it must never act for its parent.
The children run the handler they inherited, then exit (dramatiq's own
handler, inherited too, only logs at a first SIGTERM: the pool's
terminate would wait for them forever).  Each terminated pool is recorded
as a line in ``pools-<pid>.jsonl``."""

from __future__ import annotations

import multiprocessing
import os
import signal
from types import FrameType
from typing import Any

import dramatiq

from tests.apps.cronapp import _append, _true_time, broker

__all__ = ["broker"]


@dramatiq.actor(cron="* * * * * *", max_retries=0)
def fork_pool() -> None:
    context = multiprocessing.get_context("fork")
    # Both children must have run the initializer before the pool is
    # terminated: a child still starting (a loaded machine) would get the
    # SIGTERM under dramatiq's inherited handler alone, which only logs, and
    # the terminate would wait for it forever.
    started = context.Barrier(2)
    with context.Pool(2, initializer=_exit_after_the_inherited_handler, initargs=(started,)) as pool:
        children = pool.map(_pid, range(2), chunksize=1)
    _append("pools", {"pid": os.getpid(), "children": sorted(set(children)), "at": _true_time()})


_STARTED: list[Any] = []


def _exit_after_the_inherited_handler(started: Any) -> None:
    _STARTED.append(started)
    inherited = signal.getsignal(signal.SIGTERM)
    assert callable(inherited)

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            inherited(signum, frame)
        finally:
            os._exit(0)

    signal.signal(signal.SIGTERM, handler)


def _pid(_: int) -> int:
    _STARTED[0].wait(60)  # both children are past their initializer
    return os.getpid()
