-- A candidate's schedules, made known to the ledger before it ever leads:
-- an entry missing under the schedule's id is created as a baseline at now
-- (epoch 0: no leader decided it).  So a schedule another app version (or
-- another app sharing the prefix) does not know is caught up from the
-- moment its first process started, once this code leads.  Touches only
-- missing entries, so it needs no lease.
--
-- KEYS[1] - the ledger hash
-- KEYS[2] - the schedules' shapes hash
-- ARGV[1...] - pairs: schedule id, its shape ('' for none)
-- Returns {OK, now, flags, the number of entries created}; nothing is
-- written when the ledger or the shapes hold the wrong type (C_TICKS).
local now = server_now()
if not usable(KEYS[1], 'hash') or not usable(KEYS[2], 'hash') then return {ST_OK, now, C_TICKS, 0} end
if #ARGV % 2 ~= 0 then return {ST_BAD_REQUEST, now, 0, 'schedule ids and shapes differ in number'} end
local created = 0
for i = 1, #ARGV, 2 do
  local sid, shape = ARGV[i], ARGV[i + 1]
  if redis.call('HSETNX', KEYS[1], sid, now .. ':0:baseline') == 1 then created = created + 1 end
  if shape ~= '' then redis.call('HSETNX', KEYS[2], sid, shape) end
end
return {ST_OK, now, 0, created}
