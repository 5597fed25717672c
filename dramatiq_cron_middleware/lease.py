"""The lease: which candidate leads, for how long, and how followers wait.

The lease is one Redis hash holding the leader's token and epoch, expiring
after ``lock_ttl``.  Holding the lease is necessary but not sufficient to
fire: every claim in the ledger is checked against the lease token inside
Redis (see ``ledger.py``), so a process that merely *believes* it leads
cannot enqueue.  This module only acquires, renews, releases and waits.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import redis

from .clock import Clock
from .keys import Keys

__all__ = ["Acquired", "Held", "Lease"]

# Take the lease if it is free; refresh it if it is already ours (a retry
# after a reply was lost must not look like someone else holding it).
# Bumps the epoch on every new acquisition and reports whether the epoch
# counter had vanished (a wiped or failed-over Redis).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now, ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 10 * ttl)
local holder = redis.call('HGET', KEYS[1], 'token')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('HSET', KEYS[1], 'renewed', now, 'conn', ARGV[6])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'epoch')), now, tonumber(redis.call('HGET', KEYS[1], 'fresh') or '0')}
end
if holder then
  return {0, redis.call('PTTL', KEYS[1]), now, 0}
end
local fresh = 0
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- The counter vanished (wipe, failover to an empty replica).  Restart it
  -- above every epoch the ledger still names, so epochs stay unique.
  fresh = 1
  local highest = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[4])) do
    local e = tonumber(string.match(v, '^%-?%d+:(%d+)'))
    if e and e > highest then highest = e end
  end
  redis.call('SET', KEYS[2], highest)
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'epoch', epoch, 'host', ARGV[3], 'pid', ARGV[4],
           'since', now, 'renewed', now, 'ttl', ttl, 'candidate', ARGV[5], 'fresh', fresh,
           'conn', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, epoch, now, fresh}
"""

# Extend the lease only if it still holds our token.  PEXPIRE replaces the
# TTL, so retried renewals never stretch the lease beyond one TTL.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now, ARGV[3])
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0, now} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], 'renewed', now, 'conn', ARGV[4])
return {1, now}
"""

# Fast takeover: delete the lease only if it still holds the token and the
# connection id the caller saw, and Redis no longer knows that connection
# (checked by the caller with CLIENT LIST ID, which scripts may not run).
# Fencing keeps this safe even if the leader is alive but was cut off: its
# claims are refused from the moment the key is gone.
_DEPOSE = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'conn') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# Compare-and-delete, then wake the followers seen recently so one of them
# takes over at once instead of waiting for the TTL.
_RELEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[2])
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local n = redis.call('ZCOUNT', KEYS[3], now - 2 * ttl, '+inf')
if n < 1 then n = 1 end
if n > 64 then n = 64 end
for i = 1, n do redis.call('RPUSH', KEYS[2], now) end
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
"""


@dataclasses.dataclass(frozen=True)
class Acquired:
    """This candidate now holds the lease."""

    epoch: int
    server_ms: int
    #: The epoch counter was missing: the Redis data was wiped or a replica
    #: without it was promoted.
    epoch_was_missing: bool


@dataclasses.dataclass(frozen=True)
class Held:
    """Another candidate holds the lease for ``remaining_ms`` more."""

    remaining_ms: int


class Lease:
    """One candidate's handle on the shared lease.

    Parameters:
      client: The scheduler's command client (short timeouts).
      blocking_client: The client used to block while following.
      keys: The key names.
      ttl_ms: The lease length in milliseconds.
      clock: Refreshed from the server time every script returns.
      host, pid: Shown to operators as the leader's identity.
      presence_client: For fast takeover: a single-connection client whose
        ``CLIENT ID`` is registered in the lease while leading, so followers
        can tell when the leader's process is gone.  None disables it.
    """

    def __init__(
        self,
        *,
        client: redis.Redis,
        blocking_client: redis.Redis,
        keys: Keys,
        ttl_ms: int,
        clock: Clock,
        host: str,
        pid: int,
        presence_client: redis.Redis | None = None,
    ) -> None:
        self.keys = keys
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.host = host
        self.pid = pid
        self.candidate_id = uuid.uuid4().hex[:12]
        self.member = f"{host}|{pid}|{self.candidate_id}"
        self.token: str | None = None
        self._attempt: str | None = None
        self._client = client
        self._blocking = blocking_client
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._depose = client.register_script(_DEPOSE)
        self._presence = presence_client

    def acquire(self) -> Acquired | Held:
        """Try once to take the lease."""
        # An attempt whose reply was lost (a timeout, a stalled Redis) may
        # have taken the lease anyway; retrying with the same token finds
        # that "ghost" lease ours instead of waiting a whole TTL for it.
        token = self.token or self._attempt or f"{self.candidate_id}-{uuid.uuid4().hex[:8]}"
        self._attempt = token
        result = self._call(
            self._acquire,
            [self.keys.lease, self.keys.epoch, self.keys.candidates, self.keys.ticks],
            [token, self.ttl_ms, self.host, self.pid, self.member, self.presence_id()],
        )
        self._attempt = None
        if int(result[0]) == 1:
            self.token = token
            return Acquired(epoch=int(result[1]), server_ms=int(result[2]), epoch_was_missing=bool(int(result[3])))
        self.token = None
        return Held(remaining_ms=int(result[1]))

    def renew(self) -> bool:
        """Extend the lease; False when Redis no longer holds our token."""
        if self.token is None:
            return False
        result = self._call(
            self._renew,
            [self.keys.lease, self.keys.candidates],
            [self.token, self.ttl_ms, self.member, self.presence_id()],
        )
        if int(result[0]) != 1:
            self.token = None
            return False
        return True

    def release(self) -> bool:
        """Give the lease up (compare-and-delete) and wake the followers;
        also removes this candidate from the candidate list."""
        # A pending attempt's lost reply may have won the lease: release that too.
        token, self.token, self._attempt = self.token or self._attempt, None, None
        result = self._client_call(
            self._release,
            [self.keys.lease, self.keys.wake, self.keys.candidates],
            [token or "-", self.member, self.ttl_ms],
        )
        return int(result) == 1

    def forget(self) -> None:
        """Drop the local belief of leading, without touching Redis."""
        self.token = None

    def presence_id(self) -> str:
        """The ``CLIENT ID`` of this process's presence connection ("" when
        fast takeover is off or Redis is unreachable).  Asking also keeps the
        connection from idling out, and after a reconnection registers the
        new id with the next renewal."""
        if self._presence is None:
            return ""
        try:
            return str(self._presence.client_id())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return ""

    def depose_if_gone(self) -> bool:
        """Fast takeover: if the leader registered a presence connection and
        Redis no longer knows it (the process died: its sockets closed),
        delete the lease (compare-and-delete on what we saw) and return True."""
        token, conn = self._client.hmget(self.keys.lease, ["token", "conn"])
        if not token or not conn:
            return False
        if self._client.client_list(client_id=[conn]):
            return False
        return int(self._depose(keys=[self.keys.lease], args=[token, conn])) == 1

    def wait_for_release(self, timeout_ms: int) -> bool:
        """Block until a leader releases the lease, our own wake-up list is
        pushed, or ``timeout_ms`` passes.  True when woken by a push."""
        timeout = max(timeout_ms, 1) / 1000
        popped = self._blocking.blpop([self.keys.wake, self.keys.wake_one(self.candidate_id)], timeout=timeout)
        return popped is not None

    def wake_self(self) -> None:
        """Interrupt our own ``wait_for_release`` (used at shutdown)."""
        key = self.keys.wake_one(self.candidate_id)
        pipe = self._client.pipeline(transaction=False)
        pipe.rpush(key, 1)
        pipe.pexpire(key, self.ttl_ms)
        pipe.execute()

    def _call(self, script: Any, keys: list[str], args: list[Any]) -> list[Any]:
        sent = time.monotonic()
        result = script(keys=keys, args=args)
        received = time.monotonic()
        self.clock.observe(int(result[2] if script is self._acquire else result[1]), sent, received)
        return list(result)

    def _client_call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        return script(keys=keys, args=args)
