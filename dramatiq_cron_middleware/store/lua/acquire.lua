-- Take the lease if it is free, or refresh it if it is already ours (a
-- retry after a lost reply must not look like someone else holding it).
-- Bumps the epoch on every new acquisition and reports whether the epoch
-- counter had vanished (a wipe, an eviction, a failover to an empty node).
-- Everything is validated before anything is written; a corrupt key is
-- treated as missing and reported in the flags.
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the epoch counter
-- KEYS[3] - the candidates sorted set
-- KEYS[4] - the ledger hash (read to restart a vanished epoch counter)
-- KEYS[5] - the candidates' info hash (fingerprint and app version)
-- ARGV[1] - the caller's token
-- ARGV[2] - the lease length, ms
-- ARGV[3] - host, ARGV[4] - pid (shown to operators)
-- ARGV[5] - the candidate's member in the candidates set
-- ARGV[6] - the presence connection id ('' without fast takeover)
-- ARGV[7] - the candidate's schedule fingerprint, ARGV[8] - its app version
-- ARGV[9] - how long (ms) after its last touch a candidate is forgotten
-- Returns {OK, now, flags, epoch, fresh} when the caller holds the lease,
-- or {DECLINED, now, flags, pttl, holder token, holder renewal count}.
local now = server_now()
local ttl = tonumber(ARGV[2])
local flags = 0
local lease_ok = usable(KEYS[1], 'hash')
if not lease_ok then flags = flags + C_LEASE end
local holder = nil
if lease_ok then holder = redis.call('HGET', KEYS[1], 'token') end
local epoch_ok = usable(KEYS[2], 'string')
local epoch_value = nil
if epoch_ok then epoch_value = redis.call('GET', KEYS[2]) end
if epoch_value and not integer(epoch_value) then epoch_ok = false end
if not epoch_ok then flags = flags + C_EPOCH end
local candidates_ok = usable(KEYS[3], 'zset')
if not candidates_ok then flags = flags + C_CANDIDATES end
local ticks_ok = usable(KEYS[4], 'hash')
if not ticks_ok then flags = flags + C_TICKS end

-- Writes start here.
if not candidates_ok then redis.call('DEL', KEYS[3]) end
if not usable(KEYS[5], 'hash') then redis.call('DEL', KEYS[5]) end
redis.call('ZADD', KEYS[3], now, ARGV[5])
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[9]))
if #gone > 0 then
  redis.call('ZREM', KEYS[3], unpack(gone))
  redis.call('HDEL', KEYS[5], unpack(gone))
end
redis.call('HSET', KEYS[5], ARGV[5], ARGV[7] .. '|' .. ARGV[8])
if holder == ARGV[1] then
  local epoch = integer(redis.call('HGET', KEYS[1], 'epoch'))
  if epoch then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('HSET', KEYS[1], 'renewed', now, 'conn', ARGV[6])
    redis.call('HINCRBY', KEYS[1], 'seq', 1)
    return {ST_OK, now, flags, epoch, tonumber(redis.call('HGET', KEYS[1], 'fresh') or '0') or 0}
  end
  -- Our own lease with an unusable epoch: start over below.
  holder = nil
  flags = flags + C_LEASE
end
if holder then
  local seq = redis.call('HGET', KEYS[1], 'seq') or ''
  return {ST_DECLINED, now, flags, redis.call('PTTL', KEYS[1]), holder, seq}
end
local fresh = 0
if not epoch_value or not epoch_ok then
  -- The counter vanished.  Restart it above every epoch the ledger still
  -- names, so that epochs stay unique.
  fresh = 1
  local highest = 0
  if ticks_ok then
    for _, v in ipairs(redis.call('HVALS', KEYS[4])) do
      local _, e = parse_entry(v)
      e = tonumber(e)
      if e and e > highest then highest = e end
    end
  end
  redis.call('DEL', KEYS[2])
  redis.call('SET', KEYS[2], highest)
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'epoch', epoch, 'host', ARGV[3], 'pid', ARGV[4],
           'since', now, 'renewed', now, 'ttl', ttl, 'candidate', ARGV[5], 'fresh', fresh,
           'conn', ARGV[6], 'seq', 1)
redis.call('PEXPIRE', KEYS[1], ttl)
return {ST_OK, now, flags, epoch, fresh}
