-- Extend the lease only if it still holds our token.  PEXPIRE replaces the
-- TTL, so retried renewals never stretch the lease beyond one TTL.  The
-- renewal count lets followers see, on their own monotonic clocks, whether
-- anyone still renews (key expiry follows the server's wall clock).
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the candidates sorted set
-- ARGV[1] - the caller's token
-- ARGV[2] - the lease length, ms
-- ARGV[3] - the candidate's member
-- ARGV[4] - the presence connection id
-- Returns {1, now} renewed, {0, now} not ours.
local now = server_now()
if not usable(KEYS[1], 'hash') then return {0, now} end
if usable(KEYS[2], 'zset') then redis.call('ZADD', KEYS[2], now, ARGV[3]) end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0, now} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], 'renewed', now, 'conn', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return {1, now}
