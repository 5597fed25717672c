"""The lease key watched in Redis through keyspace notifications: whether
it was deleted (a release, or a deposition) or expired (nobody released
it), told by Redis itself, however slowly anything ran."""

from __future__ import annotations

import time
from typing import Any

import redis

LEASE = "{dramatiq-cron}:lease"

__all__ = ["lease_events", "lease_gone"]


def lease_events(client: redis.Redis, key: str = LEASE) -> Any:
    """A subscription to the lease key's ``del`` and ``expired`` events
    (and renewals' ``expire``), confirmed before it returns."""
    client.config_set("notify-keyspace-events", "Kgx")
    listener = client.pubsub()  # type: ignore[no-untyped-call]
    listener.subscribe(f"__keyspace@0__:{key}")
    confirmed = listener.get_message(timeout=30)
    assert confirmed is not None and confirmed["type"] == "subscribe", confirmed
    return listener


def lease_gone(listener: Any, *, timeout: float) -> str:
    """Block until Redis reports the lease deleted or expired; return which
    ("" after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        message = listener.get_message(timeout=left)
        if message is not None and message["type"] == "message" and message["data"] in ("del", "expired"):
            return str(message["data"])
    return ""
