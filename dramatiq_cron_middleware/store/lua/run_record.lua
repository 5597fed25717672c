-- Record the start or the finish of a cron message's run (one round trip
-- from the worker), and append the event the leader decides health from.
--
-- KEYS[1] - the schedule's runs hash, tick -> JSON record
-- KEYS[2] - the schedule's runs order sorted set, tick scored by tick
-- KEYS[3] - the newest run of every schedule, hash schedule id -> JSON
-- KEYS[4] - the run events stream
-- KEYS[5] - the live runs sorted set (r|<tick>|<schedule id> -> heartbeat lapse, ms)
-- ARGV[1] - 'start' or 'finish'
-- ARGV[2] - the schedule id
-- ARGV[3] - the tick, ms
-- ARGV[4] - the attempt (1 for the first delivery)
-- ARGV[5] - a token unique to this delivery of the message
-- ARGV[6] - host
-- ARGV[7] - pid
-- ARGV[8] - how many runs to keep per schedule
-- ARGV[9] - the approximate cap of the events stream
-- ARGV[10] - with 'finish': the outcome (succeeded, failed, retrying, dropped)
-- ARGV[11] - with 'finish': the error ('' for none)
-- ARGV[12] - with 'start': how long (ms) the run counts as alive without a heartbeat
-- Returns {OK, now, 0} when recorded (or already recorded: a retry of a
-- call whose reply was lost writes nothing twice), {DECLINED, now, 0} when
-- the record belongs to another delivery (a duplicate, or a newer attempt).
local now = server_now()
local mode, sid, tick, attempt, token = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
if not usable(KEYS[1], 'hash') or not usable(KEYS[2], 'zset') or not usable(KEYS[3], 'hash')
   or not usable(KEYS[4], 'stream') or not usable(KEYS[5], 'zset') then
  return {ST_DECLINED, now, 0}
end
local record = nil
local stored = redis.call('HGET', KEYS[1], ARGV[3])
if stored then
  local ok, decoded = pcall(cjson.decode, stored)
  if ok and type(decoded) == 'table' then record = decoded end
end
local alive = 'r|' .. ARGV[3] .. '|' .. sid
local open = record == nil or record['outcome'] == 'pending' or record['outcome'] == 'lost'
local mine = record ~= nil and record['d'] == token
if mode == 'start' then
  if mine and record['outcome'] == 'running' then return {ST_OK, now, 0} end  -- a retry
  -- Another delivery of the same attempt already started (or finished)
  -- it: this one is a duplicate.  A newer attempt always wins.
  if not open and not mine and (tonumber(record['attempt']) or 0) >= attempt then
    return {ST_DECLINED, now, 0}
  end
  record = {tick = tick, outcome = 'running', attempt = attempt, started = now, host = ARGV[6],
            pid = tonumber(ARGV[7]), d = token}
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[12]), alive)
else
  local outcome = ARGV[10]
  if mine and record['outcome'] == outcome and record['finished'] then return {ST_OK, now, 0} end  -- a retry
  if record ~= nil and not mine then
    if outcome == 'dropped' and not open then return {ST_DECLINED, now, 0} end
    if (tonumber(record['attempt']) or 0) > attempt then return {ST_DECLINED, now, 0} end
  end
  if record == nil or not mine then
    -- The start was not recorded (Redis was down then): a finish alone.
    record = {tick = tick, attempt = attempt, host = ARGV[6], pid = tonumber(ARGV[7]), d = token}
  end
  redis.call('ZREM', KEYS[5], alive)
  record['outcome'] = outcome
  record['finished'] = now
  if ARGV[11] ~= '' then record['error'] = ARGV[11] else record['error'] = nil end
end
local json = cjson.encode(record)
put_run(KEYS[1], KEYS[2], KEYS[3], sid, ARGV[3], json, tonumber(ARGV[8]))
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[9], '*', 'kind', mode, 'schedule', sid, 'tick', ARGV[3],
           'outcome', record['outcome'], 'at', now, 'started', record['started'] or '', 'error', record['error'] or '')
return {ST_OK, now, 0}
