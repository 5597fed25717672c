"""The worker side of ``overlap="skip"``: clearing a schedule's running mark.

When the leader fires a tick of a skip-overlap schedule, the claim script
marks ``{prefix}:running:<schedule id>`` with the message id and an expiry
(the schedule's ``overlap_ttl``); while the mark exists, further ticks are
recorded as ``skipped``.  The worker that finishes the message (success,
final failure, or a skip such as ``AgeLimit``) removes the mark, so the
next tick fires.  A worker killed mid-run never removes it; the expiry
then unblocks the schedule.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

from .codes import decode, load_script
from .connection import redact
from .keys import Keys

__all__ = ["RunningMarks"]


class RunningMarks:
    """Clears running marks from the worker threads.

    Parameters:
      keys: The key names.
      client_factory: Builds the short-timeout client on first use (so a
        worker that never runs a skip-overlap message never connects).
      logger: Where a failing Redis is reported, once when it starts to
        fail and once when it works again.
    """

    def __init__(self, *, keys: Keys, client_factory: Callable[[], redis.Redis], logger: logging.Logger) -> None:
        self.keys = keys
        self.logger = logger
        self._factory = client_factory
        self._lock = threading.Lock()
        self._script: Any = None
        self._failing = False  # one state, so a plain flag (leader.reports.Episode sits a layer above)

    def clear(self, schedule_id: str, message_id: str) -> bool:
        """Remove the mark of ``schedule_id`` if it names ``message_id``.

        Never raises: on a Redis error the mark stays until it expires,
        which delays the schedule's next fire but must not fail the message.
        """
        try:
            with self._lock:
                if self._script is None:
                    self._script = load_script(self._factory(), "overlap_clear")
            removed = decode(self._script(keys=[self.keys.running(schedule_id)], args=[message_id])).ok
        except Exception as exc:  # Redis down, a bad URL...: never fail the message
            if not self._failing:
                self._failing = True
                self.logger.warning(
                    "Could not clear the running mark of %s (%s); it expires on its own.",
                    schedule_id,
                    redact(f"{type(exc).__name__}: {exc}"),
                )
            return False
        if self._failing:
            self._failing = False
            self.logger.warning("Clearing running marks works again.")
        return bool(removed)
