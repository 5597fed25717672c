"""Deduplication marks in Redis: the claim of one attempt of a cron message."""

from __future__ import annotations

import os

import redis

from .codes import decode, load_script
from .keys import Keys

__all__ = ["DedupMarks"]


class DedupMarks:
    """``{prefix}:dedup:<message id>`` marks (``store/lua/dedup_claim.lua``).

    Parameters:
      client: The scheduler's Redis (the marks sit beside its ledger).
      keys: The key names.
      ttl_ms: How long a mark is kept.
    """

    def __init__(self, client: redis.Redis, keys: Keys, *, ttl_ms: int) -> None:
        self.client = client
        self.keys = keys
        self.ttl_ms = ttl_ms
        self._claim = load_script(client, "dedup_claim")

    def claim(self, message_id: str, attempt: int, *, token: str | None = None) -> bool:
        """Claim an attempt of a message: False when another delivery of
        the same attempt holds it.  A resent claim (its reply lost) finds
        its own ``token`` (by default a fresh one) and succeeds."""
        token = token if token is not None else os.urandom(8).hex()
        return decode(self._claim(keys=[self.keys.dedup(message_id)], args=[attempt, token, self.ttl_ms])).ok
