-- A candidate's schedules, made known to the ledger before it ever leads:
-- an entry missing under the current identity is moved from the legacy
-- identity if there is one, else created as a baseline at now (epoch 0:
-- no leader decided it).  So a schedule another app version (or another
-- app sharing the prefix) does not know is caught up from the moment its
-- first process started, once this code leads.  Touches only missing
-- entries, so it needs no lease.
--
-- KEYS[1] - the ledger hash
-- KEYS[2] - the schedules' shapes hash
-- KEYS[3] - the paused set
-- ARGV[1...] - triples: schedule id, its legacy id ('' for none), its shape
-- Returns the number of entries created or moved.
local now = server_now()
if not usable(KEYS[1], 'hash') or not usable(KEYS[2], 'hash') or not usable(KEYS[3], 'set') then return 0 end
if #ARGV % 3 ~= 0 then return 0 end
local created = 0
for i = 1, #ARGV, 3 do
  local sid, legacy, shape = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HEXISTS', KEYS[1], sid) == 0 then
    local v = nil
    if legacy ~= '' then v = redis.call('HGET', KEYS[1], legacy) end
    if v then
      redis.call('HSET', KEYS[1], sid, v)
      redis.call('HDEL', KEYS[1], legacy)
      if redis.call('SREM', KEYS[3], legacy) == 1 then redis.call('SADD', KEYS[3], sid) end
    else
      redis.call('HSET', KEYS[1], sid, now .. ':0:baseline')
    end
    created = created + 1
  end
  if shape ~= '' then redis.call('HSETNX', KEYS[2], sid, shape) end
end
return created
