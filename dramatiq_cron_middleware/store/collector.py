"""Keeping the cyclic garbage collector out of a takeover's way."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a takeover loads and syncs
    a large runtime set: it allocates many objects, none of them cyclic
    garbage, and each growth of the heap would make the collector walk it
    all again.  Reference
    counting still frees everything; the collector runs again as soon as
    the block ends.  Nested uses keep it paused until the outermost ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
