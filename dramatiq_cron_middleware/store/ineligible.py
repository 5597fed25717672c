"""Processes that may not lead, in Redis: ``{p}:ineligible``."""

from __future__ import annotations

import os
import socket
import uuid

import redis

from .codes import decode, load_script
from .keys import Keys
from .timing import Timing

__all__ = ["IneligibleSet"]


class IneligibleSet:
    """This process's entry in the set of processes that may not lead, and
    the count of the live eligible candidates (``store/lua/observe.lua``).

    Parameters:
      client: The scheduler's client (short timeouts).
      keys: The scheduler's keys.
      timing: Candidates count as live within ``candidate_live_ms`` and are
        forgotten after ``candidate_forgotten_ms``.
    """

    def __init__(self, client: redis.Redis, keys: Keys, timing: Timing) -> None:
        self.client = client
        self.keys = keys
        self.timing = timing
        self.member = f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:12]}"
        self._observe = load_script(client, "observe")

    def observe(self) -> int:
        """Say this process is alive; how many eligible candidates are live.
        Raises ``redis.RedisError`` when Redis did not answer."""
        reply = self._observe(
            keys=[self.keys.candidates, self.keys.ineligible],
            args=[self.member, self.timing.candidate_live_ms, self.timing.candidate_forgotten_ms],
        )
        return int(decode(reply).payload[0])

    def leave(self) -> None:
        """Drop this process from the set (best effort: an entry is
        forgotten after ten leases anyway)."""
        try:
            self.client.zrem(self.keys.ineligible, self.member)
        except redis.RedisError:
            pass
