"""The lease key watched in Redis through keyspace notifications: whether
it was deleted (a release, or a deposition) or expired (nobody released
it), told by Redis itself, however slowly anything ran."""

from __future__ import annotations

import time
from typing import Any

import redis

LEASE = "{dramatiq-cron}:lease"

__all__ = ["LeaseEvents", "lease_events", "lease_gone"]


class LeaseEvents:
    """A subscription to a key's ``del`` and ``expired`` events (and
    renewals' ``expire``), confirmed before the constructor returns.

    It holds the client it was made from for as long as it lives: a
    redis-py client closes its own connection pool when it is collected,
    the subscription's connection with it, and the next read subscribes
    again without a word, so an event in between is lost.  (A listener
    made from ``redis_server.client()`` lost the release that came a few
    ms after SIGTERM in 4 of 15 runs under load.)  A second subscription
    confirmation means that happened anyway: :meth:`gone` fails then
    instead of waiting for an event it may have missed.

    Parameters:
      client: The client to subscribe with; kept until :meth:`close`.
      key: The key to watch (the default prefix's lease).
    """

    def __init__(self, client: redis.Redis, key: str = LEASE) -> None:
        self.client = client
        client.config_set("notify-keyspace-events", "Kgx")
        self.pubsub = client.pubsub()  # type: ignore[no-untyped-call]
        self.pubsub.subscribe(f"__keyspace@0__:{key}")
        confirmed = self.pubsub.get_message(timeout=30)
        assert confirmed is not None and confirmed["type"] == "subscribe", confirmed

    def gone(self, *, timeout: float) -> str:
        """Block until Redis reports the key deleted or expired; return
        which ("" after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.get_message(timeout=left)
            if message is not None and message["type"] == "message" and message["data"] in ("del", "expired"):
                return str(message["data"])
        return ""

    def get_message(self, *, timeout: float) -> Any:
        """The next event (None after ``timeout`` seconds), failing if the
        subscription was made again (events were lost in between)."""
        message: Any = self.pubsub.get_message(timeout=timeout)
        assert message is None or message["type"] != "subscribe", (
            "the subscription was dropped and made again: events were lost"
        )
        return message

    def close(self) -> None:
        """Unsubscribe (the client stays the caller's)."""
        self.pubsub.close()


def lease_events(client: redis.Redis, key: str = LEASE) -> LeaseEvents:
    """A confirmed subscription to ``key``'s events (see :class:`LeaseEvents`)."""
    return LeaseEvents(client, key)


def lease_gone(listener: LeaseEvents, *, timeout: float) -> str:
    """Block until Redis reports the lease deleted or expired; return which
    ("" after ``timeout`` seconds)."""
    return listener.gone(timeout=timeout)
