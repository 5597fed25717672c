-- Remove one runtime definition: its revision goes with it (so no claim of
-- it is granted any more) and its change entry becomes a tombstone.
--
-- KEYS[1..9] - as runtime_write.lua
-- ARGV[1] - the schedule id
-- Returns {OK, now, 0, the removal's version}, or {DECLINED, now, 0} if
-- there was nothing to remove; an error (nothing written) for a foreign
-- value under KEYS[1..5].
local refused = runtime_keys_refusal()
if refused then return refused end
local now = server_now()
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return {ST_DECLINED, now, 0}
end
local version = redis.call('INCR', KEYS[3])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZADD', KEYS[4], version, ARGV[1])
notify_runtime(KEYS[9])
return {ST_OK, now, 0, version}
