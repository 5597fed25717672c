"""The tick ledger: fenced claims, last-fired ticks and the outcome history.

The ledger is the resource the lease protects, and it protects itself:
every script here first checks that the lease still holds the caller's
token, inside Redis, atomically with the write.  A leader that was paused,
cut off or deposed is refused by Redis, not by its own belief.  For each
schedule the ledger keeps the last tick decided (fired, caught up, skipped,
missed or paused) and the epoch that decided it; a tick is claimed only if
it is newer than that, so each tick is decided once across all leaders.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

import redis

from .clock import Clock
from .keys import Keys

__all__ = ["Claim", "Ledger", "NotLeader", "Outcome"]

# Return the last tick of every schedule, fenced.  A schedule with no entry
# (new, or its ledger was wiped) gets a baseline of the server time now:
# nothing at or before it may fire, because nothing proves it unfired.
_SYNC = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0, now} end
local out = {1, now}
for i = 3, #ARGV do
  local v = redis.call('HGET', KEYS[2], ARGV[i])
  if not v then
    v = now .. ':' .. ARGV[2] .. ':baseline'
    redis.call('HSET', KEYS[2], ARGV[i], v)
  end
  table.insert(out, v)
end
return out
"""

# Decide a batch of ticks, fenced.  ARGV: token, epoch, history cap, key
# tag, batch id, and a JSON array of entries, each an array of:
#   schedule id, tick ms, outcome, fire (1/0), detail, message id, overlap ttl ms
# For each entry the tick must be newer than the schedule's last tick; a
# retry by the epoch that already decided this very tick is answered the
# same way (the first reply may have been lost to a timeout).  Results per
# entry: 1 fire it, 0 refused (already decided), 2 recorded without firing,
# 3 skipped because the previous message is still running, 4 paused,
# -1 no ledger entry (wiped: the leader must sync again).
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A batch runs at most once.  A retry after a lost reply gets the first
-- run's answers (even if the lease moved on since); a batch the caller has
-- settled as never run ('void') is refused whole, writing nothing.
local entries = cjson.decode(ARGV[6])
local prior = redis.call('GET', ARGV[4] .. ':batch:' .. ARGV[5])
if prior then
  local out = {1, now}
  if prior == 'void' then
    for _ = 1, #entries do table.insert(out, 0) end
  else
    for r in string.gmatch(prior, '[^,]+') do table.insert(out, tonumber(r)) end
  end
  return out
end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0, now} end
local epoch = ARGV[2]
local maxlen = tonumber(ARGV[3])
local prefix = ARGV[4]
local out = {1, now}
-- Most of the time nothing is paused: skip two lookups per entry then.
local any_paused = redis.call('SCARD', KEYS[4]) > 0
for _, e in ipairs(entries) do
  local sid, tick, outcome, fire = e[1], e[2], e[3], e[4]
  local detail, mid, overlap = e[5], e[6], e[7]
  local v = redis.call('HGET', KEYS[2], sid)
  if not v then
    table.insert(out, -1)
  else
    local last, by = string.match(v, '^(%-?%d+):(%d+)')
    last = tonumber(last)
    if tick < last or (tick == last and by ~= epoch) then
      table.insert(out, 0)
    elseif tick == last then
      table.insert(out, tonumber(string.match(v, ':(%-?%d+)$') or '0'))
    else
      local result = 2
      if fire == 1 then
        if any_paused and (redis.call('SISMEMBER', KEYS[4], sid) == 1
                           or redis.call('SISMEMBER', KEYS[4], string.match(sid, '^([^/]*)/') or '') == 1) then
          result = 4
          outcome = 'paused'
        elseif overlap > 0 and redis.call('EXISTS', prefix .. ':running:' .. sid) == 1 then
          result = 3
          outcome = 'skipped'
        else
          result = 1
          if overlap > 0 then
            redis.call('SET', prefix .. ':running:' .. sid, mid, 'PX', overlap)
          end
        end
      end
      redis.call('HSET', KEYS[2], sid, tick .. ':' .. epoch .. ':' .. result)
      redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*',
                 'schedule', sid, 'tick', tick, 'outcome', outcome, 'at', now,
                 'epoch', epoch, 'detail', detail, 'message_id', mid)
      table.insert(out, result)
    end
  end
end
-- Keep the per-entry results briefly, so a caller whose reply was lost to
-- a timeout can learn whether this batch ran and what it granted.
local results = {}
for j = 3, #out do results[#results + 1] = tostring(out[j]) end
redis.call('SET', prefix .. ':batch:' .. ARGV[5], table.concat(results, ','), 'PX', 600000)
return out
"""

# Settle a batch whose reply was lost: its results if it ran; otherwise
# void it, so that a copy of the claim still in flight can never run.
_SETTLE = """
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], 'void', 'PX', 600000)
return false
"""


class NotLeader(Exception):
    """Redis refused a fenced operation: the lease holds another token."""


class Outcome:
    """The outcomes recorded in the history stream."""

    FIRED = "fired"
    CAUGHT_UP = "caught_up"
    MISSED = "missed"
    SKIPPED = "skipped"
    PAUSED = "paused"
    TRIGGERED = "triggered"


#: Per-entry results of a claim.
FIRE, REFUSED, RECORDED, SKIPPED, PAUSED, LOST = 1, 0, 2, 3, 4, -1


@dataclasses.dataclass(frozen=True)
class Claim:
    """A request to decide one tick of one schedule."""

    schedule_id: str
    tick_ms: int
    outcome: str
    fire: bool
    detail: str = ""
    message_id: str = ""
    overlap_ttl_ms: int = 0


@dataclasses.dataclass(frozen=True)
class LastTick:
    """A schedule's entry in the ledger."""

    tick_ms: int
    epoch: int
    baseline: bool


class Ledger:
    """Fenced access to the tick ledger.

    Parameters:
      client: The scheduler's command client (short timeouts).
      keys: The key names.
      clock: Refreshed from the server time every script returns.
      history_length: Approximate cap of the history stream.
    """

    def __init__(self, *, client: redis.Redis, keys: Keys, clock: Clock, history_length: int = 10_000) -> None:
        self.keys = keys
        self.clock = clock
        self.history_length = history_length
        self._client = client
        self._sync = client.register_script(_SYNC)
        self._claim = client.register_script(_CLAIM)
        self._settle = client.register_script(_SETTLE)

    def sync(self, token: str, epoch: int, schedule_ids: Sequence[str]) -> dict[str, LastTick]:
        """Read (and where missing, baseline) every schedule's last tick.

        Raises:
          NotLeader: if the lease no longer holds ``token``.
        """
        result = self._run(self._sync, [self.keys.lease, self.keys.ticks], [token, epoch, *schedule_ids])
        out: dict[str, LastTick] = {}
        for sid, value in zip(schedule_ids, result[2:], strict=True):
            out[sid] = parse_last_tick(value)
        return out

    def claim(self, token: str, epoch: int, batch_id: str, claims: Sequence[Claim]) -> list[int]:
        """Decide a batch of ticks in one round trip; one result per claim.

        Raises:
          NotLeader: if the lease no longer holds ``token`` (nothing was
            written).
        """
        # One JSON argument instead of seven per entry: packing thousands of
        # arguments cost more client time than the script itself.
        entries = json.dumps(
            [
                [c.schedule_id, c.tick_ms, c.outcome, 1 if c.fire else 0, c.detail, c.message_id, c.overlap_ttl_ms]
                for c in claims
            ],
            separators=(",", ":"),
        )
        args: list[Any] = [token, epoch, self.history_length, self.keys.tag, batch_id, entries]
        result = self._run(self._claim, [self.keys.lease, self.keys.ticks, self.keys.history, self.keys.paused], args)
        return [int(r) for r in result[2:]]

    def batch_results(self, batch_id: str) -> list[int] | None:
        """The results of a claim whose reply was lost, or None when that
        batch never ran; from then on it never will (a copy of it still in
        flight is refused)."""
        value = self._settle(keys=[self.keys.batch(batch_id)])
        if value is None or value == "void":
            return None
        return [int(r) for r in str(value).split(",") if r]

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> list[Any]:
        sent = time.monotonic()
        result = script(keys=keys, args=args)
        self.clock.observe(int(result[1]), sent, time.monotonic())
        if int(result[0]) != 1:
            raise NotLeader()
        return list(result)


def parse_last_tick(value: str) -> LastTick:
    """Parse a ledger value ``"<tick>:<epoch>[:<result>|:baseline]"``."""
    parts = value.split(":")
    return LastTick(tick_ms=int(parts[0]), epoch=int(parts[1]), baseline=len(parts) > 2 and parts[2] == "baseline")
