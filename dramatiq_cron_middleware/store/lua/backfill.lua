-- Claim past ticks of one schedule for a backfill, each at most once.
-- The leader decides a tick only while it is after the schedule's ledger
-- entry, and the entry only moves forward; a backfill claims a tick only
-- while it is at or before the entry (and before the bound the caller read
-- the history against).  So the two never claim the same tick, and the
-- leader's entry is never written here.  Two backfills meet at the mark:
-- HSETNX, the first one wins.  backfill_settle.lua then records what was
-- enqueued (and releases what was not).
--
-- KEYS[1] - the ledger hash
-- KEYS[2] - this schedule's backfill marks (tick ms -> 'c|<run token>'
--           claimed, written here; 'e' enqueued, by backfill_settle.lua)
-- KEYS[3] - the runtime definitions' revisions hash
-- ARGV[1] - the schedule id
-- ARGV[2] - the ledger entry's tick the caller read before reading the
--           history, ms ('' when it had none)
-- ARGV[3] - the runtime revision the caller planned with (0: declared)
-- ARGV[4] - a JSON array of tick ms, oldest first
-- ARGV[5] - the caller's run token: a retry of this very call (its reply
--           lost to a timeout) finds its own marks and gets 1 again
-- Returns {OK, now, flags, result...}, one result per tick: 1 claimed by
-- this run, 0 already claimed by a backfill,
-- 2 not claimable here (after the ledger entry, the bound or the server's
-- time: the leader's); {DECLINED, now, flags} when the runtime definition
-- is gone or at another revision (nothing written);
-- {BAD_REQUEST, now, 0, message} for a malformed request.
local now = server_now()
local flags = 0
local ok, ticks = pcall(cjson.decode, ARGV[4])
if not ok or type(ticks) ~= 'table' then return {ST_BAD_REQUEST, now, 0, 'ticks are not JSON'} end
for i, t in ipairs(ticks) do
  if type(t) ~= 'number' then return {ST_BAD_REQUEST, now, 0, 'tick ' .. i .. ' is malformed'} end
end
local revision = tonumber(ARGV[3])
if revision and revision > 0 then
  if not usable(KEYS[3], 'hash') or tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '') ~= revision then
    return {ST_DECLINED, now, flags}
  end
end
local ticks_ok = usable(KEYS[1], 'hash')
if not ticks_ok then flags = flags + C_TICKS end
local marks_ok = usable(KEYS[2], 'hash')
-- The bound: the entry now, the entry the caller planned against, and the
-- server's time, whichever is first.  With no entry (never registered, or
-- lost) the leader's next baseline lies at or after now.
local bound = now
local entry = ticks_ok and parse_entry(redis.call('HGET', KEYS[1], ARGV[1]))
if entry then bound = math.min(bound, entry) end
local planned = tonumber(ARGV[2])
if planned then bound = math.min(bound, planned) end

if not marks_ok then redis.call('DEL', KEYS[2]) end
local mine = 'c|' .. ARGV[5]
local out = {ST_OK, now, flags}
for _, tick in ipairs(ticks) do
  local field = string.format('%d', tick)
  if tick > bound then
    out[#out + 1] = 2
  elseif redis.call('HSETNX', KEYS[2], field, mine) == 1 or redis.call('HGET', KEYS[2], field) == mine then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
