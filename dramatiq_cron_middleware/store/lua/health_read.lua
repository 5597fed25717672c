-- Read what the leader decides health from, in one round trip: the run
-- events after the cursor, the open runs whose deadline has passed, and
-- the stored health of every schedule they (or the caller) name.
--
-- KEYS[1] - the health cursor hash (field events: the last event id decided on)
-- KEYS[2] - the run events stream
-- KEYS[3] - the open runs sorted set
-- KEYS[4] - the health hash
-- KEYS[5] - the live runs sorted set (r|<tick>|<schedule id> -> heartbeat lapse, ms)
-- ARGV[1] - at most this many events
-- ARGV[2] - at most this many due open runs
-- ARGV[3...] - further schedule ids whose health to read
-- Returns {OK, now, 0, JSON {cursor, events: [[id, [field, value...]]...],
-- due: [member, score...], next: the earliest deadline after now (or
-- absent), health: {schedule id: JSON}, alive: {member: lapse} for the due
-- running members whose heartbeat has not lapsed}}.
local now = server_now()
local out = {cursor = '0-0', events = {}, due = {}, health = {}}
if usable(KEYS[1], 'hash') then out.cursor = redis.call('HGET', KEYS[1], 'events') or '0-0' end
if usable(KEYS[2], 'stream') then
  out.events = redis.call('XRANGE', KEYS[2], '(' .. out.cursor, '+', 'COUNT', tonumber(ARGV[1]))
end
if usable(KEYS[3], 'zset') then
  out.due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
  local later = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if later[2] then out.next = tonumber(later[2]) end
end
local alive = {}
if usable(KEYS[5], 'zset') then
  for i = 1, #out.due, 2 do
    local m = out.due[i]
    if string.sub(m, 1, 2) == 'r|' then
      local lapse = tonumber(redis.call('ZSCORE', KEYS[5], m))
      if lapse and lapse > now then alive[m] = lapse end
    end
  end
end
if next(alive) ~= nil then out.alive = alive end
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
