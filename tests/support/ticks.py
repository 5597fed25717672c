"""Tick queue set-ups shared by the tests."""

from __future__ import annotations

from collections.abc import Mapping

from dramatiq_cron_middleware.leader.tick_queue import TickQueue

__all__ = ["load"]


def load(queue: TickQueue, last: Mapping[str, int]) -> None:
    """Load ``queue`` with the last decided ticks a sync would read."""
    queue.begin_load()
    queue.load_part(last.items())
    queue.end_load()
