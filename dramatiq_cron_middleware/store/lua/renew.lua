-- Extend the lease only if it still holds our token.  PEXPIRE replaces the
-- TTL, so retried renewals never stretch the lease beyond one TTL.  The
-- renewal count lets followers see, on their own monotonic clocks, whether
-- anyone still renews (key expiry follows the server's wall clock).
--
-- A renewal also reports the live candidates (for the leader's mixed
-- schedule set check) and the runtime schedules' version (a change whose
-- notification the leader's subscription missed is read within a renewal
-- interval), so an idle leader needs no other round trip.
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the candidates sorted set
-- KEYS[3] - the candidates' info hash
-- KEYS[4] - the runtime schedules' version counter
-- ARGV[1] - the caller's token
-- ARGV[2] - the lease length, ms
-- ARGV[3] - the candidate's member
-- ARGV[4] - the presence connection id
-- ARGV[5] - how long (ms) a candidate last seen counts as live
-- Returns {OK, now, 0, runtime version ('' when not a string), info...}
-- renewed, with the '<fingerprint>|<version>' of every live candidate (''
-- for one without); {DECLINED, now, 0} not ours.
local now = server_now()
if not usable(KEYS[1], 'hash') then return {ST_DECLINED, now, 0} end
if usable(KEYS[2], 'zset') then redis.call('ZADD', KEYS[2], now, ARGV[3]) end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {ST_DECLINED, now, 0} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], 'renewed', now, 'conn', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'seq', 1)
local version = usable(KEYS[4], 'string') and (redis.call('GET', KEYS[4]) or '0') or ''
local out = {ST_OK, now, 0, version}
if not usable(KEYS[2], 'zset') then return out end
local members = redis.call('ZRANGEBYSCORE', KEYS[2], now - tonumber(ARGV[5]), '+inf')
local info_ok = usable(KEYS[3], 'hash')
for first = 1, #members, 1000 do
  local chunk = {unpack(members, first, math.min(first + 999, #members))}
  local infos = info_ok and redis.call('HMGET', KEYS[3], unpack(chunk)) or {}
  for i = 1, #chunk do out[#out + 1] = infos[i] or '' end
end
return out
