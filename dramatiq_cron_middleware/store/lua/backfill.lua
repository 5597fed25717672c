-- Claim past ticks of one schedule for a backfill, each at most once.
-- The leader decides a tick only while it is after the schedule's ledger
-- entry, and the entry only moves forward; a backfill claims a tick only
-- while it is at or before the entry (and before the bound the caller read
-- the history against).  So the two never claim the same tick, and the
-- leader's entry is never written here.  Two backfills meet at the mark:
-- HSETNX, the first one wins.
--
-- KEYS[1] - the ledger hash
-- KEYS[2] - the history stream
-- KEYS[3] - this schedule's backfill marks (tick ms -> 'c|<run token>'
--           claimed, 'e' enqueued; written here, and 'e' by the caller
--           after)
-- KEYS[4] - the runtime definitions' revisions hash
-- ARGV[1] - the schedule id
-- ARGV[2] - the ledger entry's tick the caller read before reading the
--           history, ms ('' when it had none)
-- ARGV[3] - the runtime revision the caller planned with (0: declared)
-- ARGV[4] - the history cap
-- ARGV[5] - a JSON array of [tick ms, message id], oldest first
-- ARGV[6] - the caller's run token: a retry of this very call (its reply
--           lost to a timeout) finds its own marks and gets 1 again
-- Returns {OK, now, flags, result...}, one result per tick: 1 claimed
-- (recorded 'backfilled' in the history), 0 already claimed by a backfill,
-- 2 not claimable here (after the ledger entry, the bound or the server's
-- time: the leader's); {DECLINED, now, flags} when the runtime definition
-- is gone or at another revision (nothing written);
-- {BAD_REQUEST, now, 0, message} for a malformed request.
local now = server_now()
local flags = 0
local ok, ticks = pcall(cjson.decode, ARGV[5])
if not ok or type(ticks) ~= 'table' then return {ST_BAD_REQUEST, now, 0, 'ticks are not JSON'} end
for i, t in ipairs(ticks) do
  if type(t) ~= 'table' or type(t[1]) ~= 'number' or type(t[2]) ~= 'string' then
    return {ST_BAD_REQUEST, now, 0, 'tick ' .. i .. ' is malformed'}
  end
end
local revision = tonumber(ARGV[3])
if revision and revision > 0 then
  if not usable(KEYS[4], 'hash') or tonumber(redis.call('HGET', KEYS[4], ARGV[1]) or '') ~= revision then
    return {ST_DECLINED, now, flags}
  end
end
local ticks_ok = usable(KEYS[1], 'hash')
if not ticks_ok then flags = flags + C_TICKS end
local history_ok = usable(KEYS[2], 'stream')
if not history_ok then flags = flags + C_HISTORY end
local marks_ok = usable(KEYS[3], 'hash')
-- The bound: the entry now, the entry the caller planned against, and the
-- server's time, whichever is first.  With no entry (never registered, or
-- lost) the leader's next baseline lies at or after now.
local bound = now
local entry = ticks_ok and parse_entry(redis.call('HGET', KEYS[1], ARGV[1]))
if entry then bound = math.min(bound, entry) end
local planned = tonumber(ARGV[2])
if planned then bound = math.min(bound, planned) end

if not marks_ok then redis.call('DEL', KEYS[3]) end
if not history_ok then redis.call('DEL', KEYS[2]) end
local out = {ST_OK, now, flags}
for _, t in ipairs(ticks) do
  local tick, message_id = t[1], t[2]
  local field = string.format('%d', tick)
  if tick > bound then
    out[#out + 1] = 2
  elseif redis.call('HSETNX', KEYS[3], field, 'c|' .. ARGV[6]) == 0 then
    if redis.call('HGET', KEYS[3], field) == 'c|' .. ARGV[6] then out[#out + 1] = 1 else out[#out + 1] = 0 end
  else
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
               'schedule', ARGV[1], 'tick', string.format('%d', tick), 'outcome', O_BACKFILLED, 'at', now,
               'epoch', '', 'detail', 'backfill', 'message_id', message_id)
    out[#out + 1] = 1
  end
end
return out
