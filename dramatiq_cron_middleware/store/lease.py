"""The lease: which candidate leads, for how long, and how followers wait.

The lease is one Redis hash holding the leader's token and epoch, expiring
after ``lock_ttl``.  Holding the lease is necessary but not sufficient to
fire: every claim in the ledger is checked against the lease token inside
Redis (see ``ledger.py``), so a process that merely *believes* it leads
cannot enqueue.  This module only acquires, renews, releases, deposes and
waits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import uuid
from typing import Any

import redis

from .clock import ServerClock
from .codes import Corrupt, Reply, decode, load_script
from .durability import Ack, Durability, Unconfirmed
from .keys import Keys
from .timing import Timing

__all__ = ["Acquired", "Candidate", "Held", "Lease", "Renewed"]


@dataclasses.dataclass(frozen=True)
class Acquired:
    """This candidate now holds the lease."""

    epoch: int
    server_ms: int
    #: The epoch counter was missing: the Redis data was wiped, evicted, or
    #: a node without it was promoted.
    epoch_was_missing: bool
    corrupt: Corrupt = Corrupt.NONE


@dataclasses.dataclass(frozen=True)
class Held:
    """Another candidate holds the lease for ``remaining_ms`` more (by the
    server's clock), under ``token``, renewed ``renewals`` times."""

    remaining_ms: int
    token: str = ""
    renewals: str = ""
    corrupt: Corrupt = Corrupt.NONE


@dataclasses.dataclass(frozen=True)
class Renewed:
    """The lease was extended; ``live`` holds ``(fingerprint, version)`` of
    every candidate seen within two leases (this one included), and
    ``runtime_version`` the runtime schedules' version counter (None: not
    a counter)."""

    live: list[tuple[str, str]]
    runtime_version: int | None = None


def parse_schedule_set(value: str | bytes | None) -> dict[str, str] | None:
    """A published schedule set (JSON ``{schedule id: shape}``), or None
    when it is missing or unreadable."""
    try:
        parsed = json.loads(value) if value else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclasses.dataclass(frozen=True)
class Candidate:
    """Who a candidate is, as operators see it: its host and process, and
    what it publishes (its schedule set's fingerprint, the app version)."""

    host: str = dataclasses.field(default_factory=socket.gethostname)
    pid: int = dataclasses.field(default_factory=os.getpid)
    fingerprint: str = ""
    version: str = ""


class Lease:
    """One candidate's handle on the shared lease.

    Parameters:
      client: The scheduler's command client (short timeouts).
      blocking_client: The client used to block while following.
      keys: The key names.
      ttl_ms: The lease length in milliseconds.
      clock: Refreshed from the server time every script returns.
      candidate: Who this candidate is (shown to operators, published
        with it).  Defaults to this process, with no fingerprint or version.
      presence_client: For fast takeover: a single-connection client whose
        ``CLIENT ID`` is registered in the lease while leading, so followers
        can tell when the leader's process is gone.  None disables it.
      durability: How many replicas must acknowledge an acquisition or a
        renewal before it counts.  Defaults to none.
    """

    def __init__(
        self,
        *,
        client: redis.Redis,
        blocking_client: redis.Redis,
        keys: Keys,
        ttl_ms: int,
        clock: ServerClock,
        candidate: Candidate | None = None,
        presence_client: redis.Redis | None = None,
        durability: Durability | None = None,
    ) -> None:
        self.keys = keys
        self.durability = durability or Durability()
        self.ttl_ms = ttl_ms
        self._timing = Timing.for_lease(ttl_ms)
        self.clock = clock
        candidate = candidate or Candidate()
        self.host = candidate.host
        self.pid = candidate.pid
        self.fingerprint = candidate.fingerprint
        self.version = candidate.version
        self.candidate_id = uuid.uuid4().hex[:12]
        self.member = f"{self.host}|{self.pid}|{self.candidate_id}"
        self.token: str | None = None
        self._attempt: str | None = None
        self._client = client
        self._blocking = blocking_client
        self._acquire = load_script(client, "acquire")
        self._renew = load_script(client, "renew")
        self._release = load_script(client, "release")
        self._depose = load_script(client, "depose")
        self.presence_client = presence_client
        #: The leader's subscription to runtime changes and its wake-ups.
        self._subscription: redis.client.PubSub | None = None

    def acquire(self) -> Acquired | Held:
        """Try once to take the lease.

        Raises:
          Unconfirmed: too few replicas hold the attempt (it always writes:
            the candidate's entry); if it took the lease on the master, a
            retry finds it ours.
        """
        # An attempt whose reply was lost (a timeout, a stalled Redis) may
        # have taken the lease anyway; retrying with the same token finds
        # that "ghost" lease ours instead of waiting a whole TTL for it.
        token = self.token or self._attempt or f"{self.candidate_id}-{uuid.uuid4().hex[:8]}"
        self._attempt = token
        result, acked = self._call(
            self._acquire,
            [self.keys.lease, self.keys.epoch, self.keys.candidates, self.keys.ticks, self.keys.candidate_info],
            [
                token,
                self.ttl_ms,
                self.host,
                self.pid,
                self.member,
                self.presence_id(),
                self.fingerprint,
                self.version,
                self._timing.candidate_forgotten_ms,
            ],
        )
        self.durability.check(acked)
        if result.ok:
            # The token before the attempt is cleared: a signal's hand-over
            # may read them between any two lines (see shutdown.py).
            self.token = token
            self._attempt = None
            epoch, fresh = result.payload
            return Acquired(
                epoch=int(epoch), server_ms=result.server_ms, epoch_was_missing=bool(int(fresh)), corrupt=result.corrupt
            )
        self._attempt = None
        self.token = None
        remaining, holder, renewals = result.payload
        return Held(remaining_ms=int(remaining), token=str(holder), renewals=str(renewals), corrupt=result.corrupt)

    def renew(self) -> Renewed | None:
        """Extend the lease; None when Redis no longer holds our token.

        Raises:
          Unconfirmed: extended on the master, but too few replicas hold
            the renewal: it does not count.
        """
        if self.token is None:
            return None
        result, acked = self._call(
            self._renew,
            [self.keys.lease, self.keys.candidates, self.keys.candidate_info, self.keys.runtime_version],
            [self.token, self.ttl_ms, self.member, self.presence_id(), self._timing.candidate_live_ms],
        )
        if not result.ok:
            self.token = None
            return None
        self.durability.check(acked)
        version, *infos = result.payload
        live = []
        for info in infos:
            fingerprint, _, app_version = str(info).partition("|")
            live.append((fingerprint, app_version))
        return Renewed(live=live, runtime_version=int(version) if str(version).isdigit() else None)

    def release(self, client: redis.Redis | None = None) -> bool:
        """Give the lease up (compare-and-delete) and wake the followers;
        also removes this candidate from the candidate list.  ``client``
        overrides the command client (the shutdown path uses a connection
        of its own)."""
        # A pending attempt's lost reply may have won the lease: release that too.
        token, self.token, self._attempt = self.release_token, None, None
        self.unsubscribe()
        result = self._release(
            keys=[self.keys.lease, self.keys.wake, self.keys.candidates, self.keys.candidate_info],
            args=[token or "-", self.member, self.ttl_ms, self._timing.candidate_live_ms],
            client=client,
        )
        return decode(result).ok

    def hand_over_commands(self) -> list[tuple[Any, ...]]:
        """The shutdown path's commands, for a connection of its own: the
        release (as :meth:`release`, by the script's source, so no
        ``NOSCRIPT`` can interrupt it) and a push to this candidate's
        wake-up list and channel, which ends the leader thread's blocking
        wait (following or leading).  Only
        reads attributes: called from a signal handler."""
        token = self.release_token or "-"
        wake = self.keys.wake_one(self.candidate_id)
        keys = [self.keys.lease, self.keys.wake, self.keys.candidates, self.keys.candidate_info]
        args = [token, self.member, self.ttl_ms, self._timing.candidate_live_ms]
        return [
            ("EVAL", self._release.script, len(keys), *keys, *args),
            ("RPUSH", wake, 1),
            ("PEXPIRE", wake, self.ttl_ms),
            ("PUBLISH", wake, 1),
        ]

    def forget(self) -> None:
        """Drop the local belief of leading, without touching Redis (the
        subscription's socket is closed)."""
        self.token = None
        self.unsubscribe()

    @property
    def release_token(self) -> str | None:
        """The token a release frees: the one held, else that of an
        acquisition whose reply was lost or not read yet (it may have won)."""
        return self.token or self._attempt

    def presence_id(self) -> str:
        """The ``CLIENT ID`` of this process's presence connection ("" when
        fast takeover is off or Redis is unreachable).  Asking also keeps the
        connection from idling out, and after a reconnection registers the
        new id with the next renewal."""
        if self.presence_client is None:
            return ""
        try:
            return str(self.presence_client.client_id())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return ""

    def report_replicas(self, unconfirmed: Unconfirmed | None) -> None:
        """Tell operators (``status``, the dashboard) that this candidate's
        writes lack replicas (refreshed at each retry), or, with None, that
        writes are acknowledged again."""
        if unconfirmed is None:
            self._client.delete(self.keys.replicas)
            return
        now = str(self.clock.now_ms())
        pipe = self._client.pipeline(transaction=False)
        pipe.hsetnx(self.keys.replicas, "since", now)
        pipe.hset(
            self.keys.replicas,
            mapping={
                "member": self.member,
                "acked": unconfirmed.acked,
                "required": unconfirmed.required,
                "sentinels": unconfirmed.sentinels,
                "at": now,
            },
        )
        pipe.pexpire(self.keys.replicas, 3 * self.ttl_ms)
        pipe.execute()

    def depose_if_gone(self) -> bool:
        """Fast takeover: if the leader registered a presence connection and
        Redis no longer knows it (the process died: its sockets closed),
        delete the lease (compare-and-delete on what we saw) and return True.
        Where Redis refuses ``CLIENT`` (an ACL), the presence connection is
        closed and the refusal raised: fast takeover cannot work here."""
        try:
            return self._depose_if_gone()
        except redis.ResponseError:  # NoPermissionError: an ACL without CLIENT
            presence, self.presence_client = self.presence_client, None
            if presence is not None:
                presence.close()
            raise

    def _depose_if_gone(self) -> bool:
        token, conn = self._client.hmget(self.keys.lease, ["token", "conn"])
        if not token or not conn:
            return False
        if self._client.client_list(client_id=[conn]):
            return False
        return self.depose(str(token), "conn", str(conn))

    def depose(self, token: str, field: str, seen: str) -> bool:
        """Delete the lease if it still holds ``token`` and ``field`` still
        reads ``seen``; True when deleted."""
        return decode(self._depose(keys=[self.keys.lease], args=[token, field, seen])).ok

    def publish_schedule_set(self, shapes: dict[str, str]) -> None:
        """Publish this candidate's schedule set under its fingerprint, so a
        leader can name the schedules other candidates declare differently.
        Written once per fingerprint; pruned by the leader when no
        candidate has it any more."""
        if self.fingerprint:
            self._client.hsetnx(self.keys.candidate_sets, self.fingerprint, json.dumps(shapes, sort_keys=True))

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        """The published schedule sets (id -> shape) by fingerprint; None
        for one that is missing or unreadable."""
        values = self._client.hmget(self.keys.candidate_sets, fingerprints) if fingerprints else []
        return {fingerprint: parse_schedule_set(value) for fingerprint, value in zip(fingerprints, values, strict=True)}

    def prune_schedule_sets(self, keep: set[str]) -> None:
        """Drop published sets no candidate holds any more."""
        known = [str(f) for f in self._client.hkeys(self.keys.candidate_sets)]
        stale = [f for f in known if f not in keep]
        if stale:
            self._client.hdel(self.keys.candidate_sets, *stale)

    def wait_for_release(self, timeout_ms: int) -> bool:
        """Block until a leader releases the lease, our own wake-up list is
        pushed, or ``timeout_ms`` passes.  True when woken by a push."""
        timeout = max(timeout_ms, 1) / 1000
        try:
            popped = self._blocking.blpop([self.keys.wake, self.keys.wake_one(self.candidate_id)], timeout=timeout)
        except redis.TimeoutError:
            # BLPOP times out on the server's clock: after a backward step of
            # it the socket gives up first.  Redis answered everything else;
            # this is a timeout like any other, not an unreachable server.
            return False
        return popped is not None

    def wait_for_push(self, key: str, timeout_ms: int, *, bound_ms: int) -> str | None:
        """Wait until ``key`` or our own wake-up channel is published, or
        ``timeout_ms`` passes (at most ``bound_ms``); the channel, or None
        on timeout.  (The leader waits so for runtime schedule changes and
        a stop.)

        The leader stays subscribed while it leads: a wait sends nothing,
        and a change published while it was busy is read at its next wait.
        A new subscription (the first, or one redis-py made again after a
        reconnection) counts as a change: one may have gone unseen before
        it.  The timeout is this process's clock, not the server's.
        """
        subscription = self._subscription
        try:
            if subscription is None:
                subscription = self._subscription = self._blocking.pubsub()  # type: ignore[no-untyped-call]
                subscription.subscribe(key, self.keys.wake_one(self.candidate_id))
            message = subscription.get_message(timeout=max(min(timeout_ms, bound_ms), 0) / 1000)
            popped = None
            while message is not None:  # all that arrived, in one: a change (or a subscription) first
                channel = str(message["channel"]) if message["type"] == "message" else key
                popped = key if key in (popped, channel) else channel
                message = subscription.get_message(timeout=0)
        except redis.TimeoutError:  # a reply cut short: the next wait subscribes anew
            self.unsubscribe()
            return None
        except BaseException:
            self.unsubscribe()
            raise
        return popped

    def unsubscribe(self) -> None:
        """Close the leader's subscription (a step-down, a release, a fault
        on it); the next wait subscribes again."""
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.close()

    def wake_self(self) -> None:
        """Interrupt our own ``wait_for_release`` or ``wait_for_push``
        (used at shutdown)."""
        key = self.keys.wake_one(self.candidate_id)
        pipe = self._client.pipeline(transaction=False)
        pipe.rpush(key, 1)
        pipe.pexpire(key, self.ttl_ms)
        pipe.publish(key, 1)  # a leader's wait
        pipe.execute()

    def _call(self, script: Any, keys: list[str], args: list[Any]) -> tuple[Reply, Ack]:
        """The script's reply, and what confirms it."""
        sent = self.clock.monotonic()
        raw, acked = self.durability.run(self._client, script, keys, args)
        reply = decode(raw)
        self.clock.observe(reply.server_ms, sent, self.clock.monotonic())
        return reply, acked
