-- One page of runtime changes after a version, read atomically with the
-- version counter.
--
-- KEYS[1] - the changes sorted set
-- KEYS[2] - the runtime hash
-- KEYS[3] - the version counter
-- ARGV[1] - the version already known (exclusive)
-- ARGV[2] - the page size
-- Returns {OK, now, 0, counter, id1, version1, definition1 or nil
-- (removed), ...}.
local out = {ST_OK, server_now(), 0, redis.call('GET', KEYS[3]) or '0'}
local rows = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #rows, 2 do
  out[#out + 1] = rows[i]
  out[#out + 1] = rows[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], rows[i])
end
return out
