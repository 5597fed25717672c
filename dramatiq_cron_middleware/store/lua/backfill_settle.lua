-- Settle a batch of a backfill's claims (backfill.lua): the ticks whose
-- message was enqueued become 'e' and are recorded 'backfilled' in the
-- history; the ticks that were not (the enqueue failed) are released, so
-- the next run claims them again.  Only marks this run holds are touched.
--
-- KEYS[1] - this schedule's backfill marks
-- KEYS[2] - the history stream
-- ARGV[1] - the schedule id
-- ARGV[2] - the caller's run token
-- ARGV[3] - the history cap
-- ARGV[4] - a JSON array of [tick ms, message id] enqueued
-- ARGV[5] - a JSON array of tick ms not enqueued
-- Returns {OK, now, flags, recorded, released}; {BAD_REQUEST, now, 0,
-- message} for a malformed request.
local now = server_now()
local ok1, sent = pcall(cjson.decode, ARGV[4])
local ok2, unsent = pcall(cjson.decode, ARGV[5])
if not (ok1 and ok2 and type(sent) == 'table' and type(unsent) == 'table') then
  return {ST_BAD_REQUEST, now, 0, 'ticks are not JSON'}
end
for i, t in ipairs(sent) do
  if type(t) ~= 'table' or type(t[1]) ~= 'number' or type(t[2]) ~= 'string' then
    return {ST_BAD_REQUEST, now, 0, 'enqueued tick ' .. i .. ' is malformed'}
  end
end
for i, t in ipairs(unsent) do
  if type(t) ~= 'number' then return {ST_BAD_REQUEST, now, 0, 'tick ' .. i .. ' is malformed'} end
end
local flags = 0
if not usable(KEYS[1], 'hash') then return {ST_OK, now, flags, 0, 0} end
local history_ok = usable(KEYS[2], 'stream')
if not history_ok then
  flags = flags + C_HISTORY
  redis.call('DEL', KEYS[2])
end
local mine = 'c|' .. ARGV[2]
local recorded, released = 0, 0
for _, t in ipairs(sent) do
  local field = string.format('%d', t[1])
  if redis.call('HGET', KEYS[1], field) == mine then
    redis.call('HSET', KEYS[1], field, 'e')
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*',
               'schedule', ARGV[1], 'tick', field, 'outcome', O_BACKFILLED, 'at', now,
               'epoch', '', 'detail', 'backfill', 'message_id', t[2])
    recorded = recorded + 1
  end
end
for _, tick in ipairs(unsent) do
  local field = string.format('%d', tick)
  if redis.call('HGET', KEYS[1], field) == mine then
    redis.call('HDEL', KEYS[1], field)
    released = released + 1
  end
end
return {ST_OK, now, flags, recorded, released}
