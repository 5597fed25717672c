-- Delete the lease only if it still holds the token and the field value
-- the caller saw: the registered connection (fast takeover, after the
-- caller checked with CLIENT LIST that Redis no longer knows it) or the
-- renewal count (nobody renewed for a whole lease on the caller's
-- monotonic clock).  Fencing keeps this safe even if the leader is alive:
-- its claims are refused from the moment the key is gone.
--
-- KEYS[1] - the lease hash
-- ARGV[1] - the token seen, ARGV[2] - the field, ARGV[3] - its value seen
-- Returns {OK, now, flags} deposed, {DECLINED, now, 0} the lease changed
-- meanwhile.
local now = server_now()
if not usable(KEYS[1], 'hash') then
  redis.call('DEL', KEYS[1])
  return {ST_OK, now, C_LEASE}
end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {ST_DECLINED, now, 0} end
if (redis.call('HGET', KEYS[1], ARGV[2]) or '') ~= ARGV[3] then return {ST_DECLINED, now, 0} end
redis.call('DEL', KEYS[1])
return {ST_OK, now, 0}
