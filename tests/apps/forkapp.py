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

import dramatiq

from tests.apps.cronapp import _append, _true_time, broker

__all__ = ["broker"]


@dramatiq.actor(cron="* * * * * *", max_retries=0)
def fork_pool() -> None:
    with multiprocessing.get_context("fork").Pool(2, initializer=_exit_after_the_inherited_handler) as pool:
        children = pool.map(_pid, range(4))
    _append("pools", {"pid": os.getpid(), "children": sorted(set(children)), "at": _true_time()})


def _exit_after_the_inherited_handler() -> None:
    inherited = signal.getsignal(signal.SIGTERM)
    assert callable(inherited)

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            inherited(signum, frame)
        finally:
            os._exit(0)

    signal.signal(signal.SIGTERM, handler)


def _pid(_: int) -> int:
    return os.getpid()
