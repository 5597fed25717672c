-- A process that may not lead (lead=False) says it is alive and asks
-- whether any process that may lead was seen lately.  It touches nothing
-- of the lease: no acquire, renewal or wait.
--
-- KEYS[1] - the candidates sorted set (member -> last seen, server ms)
-- KEYS[2] - the ineligible processes' sorted set (the same, for them)
-- ARGV[1] - this process's member, 'host|pid|id'
-- ARGV[2] - how long a candidate counts as live, ms
-- ARGV[3] - how long an ineligible process is remembered, ms
-- Returns {OK, now, flags, live candidates}; a foreign value under a key
-- is treated as missing and flagged (C_CANDIDATES) and, for KEYS[2],
-- replaced.
local now = server_now()
local flags = 0
local candidates_ok = usable(KEYS[1], 'zset')
local observers_ok = usable(KEYS[2], 'zset')
if not (candidates_ok and observers_ok) then flags = C_CANDIDATES end
if not observers_ok then redis.call('DEL', KEYS[2]) end
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
local live = 0
if candidates_ok then live = redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[2]), '+inf') end
return {ST_OK, now, flags, live}
