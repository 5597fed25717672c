-- Runtime definitions with the server's time (for their next fire time),
-- in one round trip: a script, because Redis Cluster refuses TIME in a
-- pipeline.
--
-- KEYS[1] - the runtime hash
-- ARGV - schedule ids
-- Returns {OK, now, 0, definition1 or nil (none), ...}.
local out = {ST_OK, server_now(), 0}
for i = 1, #ARGV do
  out[i + 3] = redis.call('HGET', KEYS[1], ARGV[i])
end
return out
