-- Read what the leader decides health from, in one round trip: the run
-- events after the cursor, the open runs whose deadline has passed, and
-- the stored health of every schedule they (or the caller) name.
--
-- KEYS[1] - the health cursor (the last event id decided on)
-- KEYS[2] - the run events stream
-- KEYS[3] - the open runs sorted set
-- KEYS[4] - the health hash
-- ARGV[1] - at most this many events
-- ARGV[2] - at most this many due open runs
-- ARGV[3...] - further schedule ids whose health to read
-- Returns {OK, now, 0, JSON {cursor, events: [[id, [field, value...]]...],
-- due: [member, score...], health: {schedule id: JSON}}}.
local now = server_now()
local out = {cursor = '0-0', events = {}, due = {}, health = {}}
if usable(KEYS[1], 'string') then out.cursor = redis.call('GET', KEYS[1]) or '0-0' end
if usable(KEYS[2], 'stream') then
  out.events = redis.call('XRANGE', KEYS[2], '(' .. out.cursor, '+', 'COUNT', tonumber(ARGV[1]))
end
if usable(KEYS[3], 'zset') then
  out.due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
end
local wanted, ids = {}, {}
local function want(sid)
  if sid and not wanted[sid] then wanted[sid] = true; ids[#ids + 1] = sid end
end
for _, e in ipairs(out.events) do
  local f = e[2]
  for i = 1, #f, 2 do if f[i] == 'schedule' then want(f[i + 1]) end end
end
for i = 1, #out.due, 2 do want(string.match(out.due[i], '^%a|%-?%d+|(.*)$')) end
for i = 3, #ARGV do want(ARGV[i]) end
if #ids > 0 and usable(KEYS[4], 'hash') then
  local values = redis.call('HMGET', KEYS[4], unpack(ids))
  for i, sid in ipairs(ids) do
    if values[i] then out.health[sid] = values[i] end
  end
end
return {ST_OK, now, 0, cjson.encode(out)}
