-- Functions every script shares.

-- The server's clock in epoch milliseconds.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The type of KEY: 'none', 'hash', 'zset', 'set', 'stream', 'string'...
local function key_type(key)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t['ok'] end
  return t
end

-- Whether KEY is absent or of type WANTED.  A key of another type is
-- corrupt: the scripts treat it as missing rather than fail half-way.
local function usable(key, wanted)
  local t = key_type(key)
  return t == 'none' or t == wanted
end

-- Parse a ledger value '<tick>:<epoch>[:<result>|:baseline]' (the grammar
-- of codes.py).  Returns tick, epoch (a string), result (a number or
-- nil) or nil when the value does not follow the grammar.
local function parse_entry(v)
  if type(v) ~= 'string' or #v > 40 then return nil end
  local tick, epoch, tail = string.match(v, '^(%-?%d+):(%d+)(.*)$')
  if not tick or #tick > 16 or #epoch > 15 then return nil end
  local result = nil
  if tail == ':baseline' then
    result = nil
  elseif tail ~= '' then
    local r = string.match(tail, '^:(%-?%d)$')
    if not r then return nil end
    result = tonumber(r)
  end
  return tonumber(tick), epoch, result
end

-- An integer from a string of digits, or nil.
local function integer(v)
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') or #v > 16 then return nil end
  return tonumber(v)
end


-- The runtime scripts' first five keys: KEYS[1] the runtime hash, KEYS[2]
-- the revisions hash, KEYS[3] the version counter, KEYS[4] the changes
-- sorted set, KEYS[5] the ids sorted set.  A foreign value under one of
-- them (nothing else writes there) is refused before anything is written:
-- returns an error reply, or nil when every one is usable.
local function runtime_keys_refusal()
  local wanted = {'hash', 'hash', 'string', 'zset', 'zset'}
  for i = 1, 5 do
    local found = key_type(KEYS[i])
    if found ~= 'none' and found ~= wanted[i] then
      return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. found .. ', not a ' .. wanted[i])
    end
  end
  local version = redis.call('GET', KEYS[3])
  if version and not tonumber(version) then
    return redis.error_reply('WRONGTYPE ' .. KEYS[3] .. ' holds ' .. version .. ', not a counter')
  end
  return nil
end

-- Wake the leader after a runtime write: the version counter KEYS[3]
-- published on the channel LIST it is subscribed to (see lease.py), and
-- one notification in the list LIST, which earlier leaders blocked on
-- (a rolling deploy); the list is only ever written here.
local function notify_runtime(list)
  local version = redis.call('GET', KEYS[3]) or '0'
  redis.call('DEL', list)
  redis.call('RPUSH', list, version)
  redis.call('PEXPIRE', list, 600000)
  redis.call('PUBLISH', list, version)
end

-- Store a run record (run monitoring): JSON under TICK in the runs hash
-- RUNS, the tick in the order sorted set ORDER (keeping the newest KEEP),
-- and the record as the schedule SID's newest run in the hash LAST when
-- its tick is the newest.
local function put_run(runs, order, last, sid, tick, json, keep)
  redis.call('HSET', runs, tick, json)
  redis.call('ZADD', order, tick, tick)
  local excess = redis.call('ZCARD', order) - keep
  if excess > 0 then
    local dropped = redis.call('ZPOPMIN', order, excess)
    for i = 1, #dropped, 2 do redis.call('HDEL', runs, dropped[i]) end
  end
  local newest = redis.call('ZREVRANGE', order, 0, 0)
  if newest[1] == tostring(tick) then redis.call('HSET', last, sid, json) end
end
