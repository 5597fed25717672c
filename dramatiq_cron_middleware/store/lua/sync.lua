-- Read the last decided tick of each schedule, fenced.  A schedule with no
-- usable entry gets a baseline: nothing at or before it may fire, because
-- nothing proves it unfired.  An entry that does not parse, or that lies
-- in the future (the server's clock was stepped forward when it was
-- written), is replaced by a baseline too and reported, so that one bad
-- value never stops a schedule for long.  An entry whose schedule changed
-- shape (expression, zone, interval, bounds) restarts from now: no burst of
-- the new shape's ticks.
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the ledger hash
-- KEYS[3] - the history stream
-- KEYS[4] - the schedules' shapes hash
-- KEYS[5] - the paused set (only checked: a wrong-typed one is removed)
-- ARGV[1] - the caller's token
-- ARGV[2] - the caller's epoch
-- ARGV[3] - the caller's estimate of now, ms (baselines never lie after
--           it, even if the server's clock jumped ahead)
-- ARGV[4] - 1 if the caller knows a ledger existed before (record its loss)
-- ARGV[5] - the history cap
-- ARGV[6] - how far in the future an entry may lie before it counts as a
--           clock-step artefact, ms
-- ARGV[7] - the caller's trusted now, ms: the latest time anything can have
--           been decided (its own timeline, this server's and its host's
--           clocks); an entry is in the future only after both it and the
--           server's time
-- ARGV[8] - the schedule ids, each followed by a newline (one string: the
--           script reads 5,000 at a time, and a triple of arguments each
--           cost the caller more than the script's whole lookup)
-- ARGV[9] - their shapes in the same order, each followed by a newline,
--           or '' when none has one
-- Returns {OK, now, flags, lost, values, codes}: values is the entries (as
-- written back) joined by newlines, codes one digit per schedule (the
-- SyncCode); {DECLINED, now, 0} when the lease holds another token;
-- {BAD_REQUEST, now, 0, message} for a malformed request.
local now = server_now()
if not usable(KEYS[1], 'hash') or redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {ST_DECLINED, now, 0} end
local flags = 0
local ticks_ok = usable(KEYS[2], 'hash')
if not ticks_ok then flags = flags + C_TICKS end
local history_ok = usable(KEYS[3], 'stream')
if not history_ok then flags = flags + C_HISTORY end
local shapes_ok = usable(KEYS[4], 'hash')
local paused_ok = usable(KEYS[5], 'set')
if not paused_ok then flags = flags + C_PAUSED end
local function lines(text)
  local out = {}
  for item in string.gmatch(text or '', '([^\n]*)\n') do out[#out + 1] = item end
  return out
end
local ids, shapes_in = lines(ARGV[8]), lines(ARGV[9])
local n = #ids
if ARGV[9] ~= '' and #shapes_in ~= n then
  return {ST_BAD_REQUEST, now, 0, 'ids and shapes differ in number'}
end
local base = math.min(tonumber(ARGV[3]) or now, now)
local future = math.max(now, tonumber(ARGV[7]) or now) + tonumber(ARGV[6])
local existed = ticks_ok and redis.call('EXISTS', KEYS[2]) == 1
-- One HMGET per chunk: a call per schedule costs more than the rest.
local current, known_shapes = {}, {}
if n > 0 and ticks_ok then current = redis.call('HMGET', KEYS[2], unpack(ids)) end
if n > 0 and shapes_ok and ARGV[9] ~= '' then known_shapes = redis.call('HMGET', KEYS[4], unpack(ids)) end
local out_values, out_codes = {}, {}
local values, shapes, rebased, reshaped = {}, {}, {}, {}
for i = 1, n do
  local sid, shape = ids[i], shapes_in[i] or ''
  local v = current[i]
  if not v then v = nil end
  local code = S_OK
  if not v then
    code = S_BASELINE
  else
    local tick = parse_entry(v)
    if not tick then code = S_CORRUPT elseif tick > future then code = S_FUTURE end
  end
  if shape ~= '' then
    local known = known_shapes[i]
    if not known then known = nil end
    if known ~= shape then
      shapes[#shapes + 1] = sid
      shapes[#shapes + 1] = shape
      if known and code == S_OK then code = S_RESHAPED end
    end
  end
  if code ~= S_OK then
    v = base .. ':' .. ARGV[2] .. ':baseline'
    values[#values + 1] = sid
    values[#values + 1] = v
    if code == S_CORRUPT or code == S_FUTURE then rebased[#rebased + 1] = sid end
    if code == S_RESHAPED then reshaped[#reshaped + 1] = sid end
  end
  out_values[i] = v
  out_codes[i] = code
end
-- Writes start here.
if not ticks_ok then redis.call('DEL', KEYS[2]) end
if not history_ok then redis.call('DEL', KEYS[3]) end
if not shapes_ok then redis.call('DEL', KEYS[4]) end
if not paused_ok then redis.call('DEL', KEYS[5]) end
local maxlen = tonumber(ARGV[5])
local lost = 0
if ARGV[4] == '1' and not existed and n > 0 then
  lost = 1
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'schedule', '*', 'tick', base,
             'outcome', O_LEDGER_LOST, 'at', now, 'epoch', ARGV[2],
             'detail', 'the ledger was gone; schedules restart from now', 'message_id', '')
end
for _, sid in ipairs(rebased) do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'schedule', sid, 'tick', base,
             'outcome', O_REBASED, 'at', now, 'epoch', ARGV[2],
             'detail', 'unusable ledger entry replaced by a baseline', 'message_id', '')
end
for _, sid in ipairs(reshaped) do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'schedule', sid, 'tick', base,
             'outcome', O_REBASED, 'at', now, 'epoch', ARGV[2],
             'detail', 'the schedule changed (expression, zone, interval or bounds): it starts from now',
             'message_id', '')
end
for j = 1, #values, 1000 do
  redis.call('HSET', KEYS[2], unpack(values, j, math.min(j + 999, #values)))
end
for j = 1, #shapes, 1000 do
  redis.call('HSET', KEYS[4], unpack(shapes, j, math.min(j + 999, #shapes)))
end
return {ST_OK, now, flags, lost, table.concat(out_values, '\n'), table.concat(out_codes)}
