-- A worker's heartbeat for the runs it is running: each stays alive for
-- ARGV[1] ms more; heartbeats that lapsed are pruned.
--
-- KEYS[1] - the live runs sorted set (r|<tick>|<schedule id> -> heartbeat lapse, ms)
-- ARGV[1] - how long (ms) each run counts as alive without another heartbeat
-- ARGV[2...] - the runs' members
-- Returns {OK, now, 0}, or {DECLINED, now, 0} when the key is of another type.
local now = server_now()
if not usable(KEYS[1], 'zset') then return {ST_DECLINED, now, 0} end
local lapse = now + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], lapse, ARGV[i]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return {ST_OK, now, 0}
