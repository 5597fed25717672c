-- Compare-and-delete the lease, then wake the followers seen recently so
-- one of them takes over at once instead of waiting for the TTL.
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the wake-up list followers block on
-- KEYS[3] - the candidates sorted set
-- KEYS[4] - the candidates' info hash
-- ARGV[1] - the caller's token ('-' for none)
-- ARGV[2] - the candidate's member
-- ARGV[3] - the lease length, ms
-- ARGV[4] - how long (ms) a candidate last seen counts as live
-- Returns {OK, now, 0} released, {DECLINED, now, 0} the lease was not ours.
local now = server_now()
local ttl = tonumber(ARGV[3])
if usable(KEYS[3], 'zset') then
  redis.call('ZREM', KEYS[3], ARGV[2])
  if usable(KEYS[4], 'hash') then redis.call('HDEL', KEYS[4], ARGV[2]) end
end
if not usable(KEYS[1], 'hash') then return {ST_DECLINED, now, 0} end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {ST_DECLINED, now, 0} end
redis.call('DEL', KEYS[1])
local n = 1
if usable(KEYS[3], 'zset') then n = redis.call('ZCOUNT', KEYS[3], now - tonumber(ARGV[4]), '+inf') end
if n < 1 then n = 1 end
if n > 64 then n = 64 end
if not usable(KEYS[2], 'list') then redis.call('DEL', KEYS[2]) end
for i = 1, n do redis.call('RPUSH', KEYS[2], now) end
redis.call('PEXPIRE', KEYS[2], ttl)
return {ST_OK, now, 0}
