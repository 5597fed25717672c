-- Remove one runtime definition: its revision goes with it (so no claim of
-- it is granted any more) and its change entry becomes a tombstone.
--
-- KEYS[1..9] - as runtime_write.lua
-- ARGV[1] - the schedule id
-- ARGV[2], ARGV[3] - optional, to retire a one-shot that is done: its
--           revision and its instant; then it is removed only if it is
--           still at that revision and its ledger entry (KEYS[6]) has
--           reached the instant (its one tick was decided)
-- Returns {OK, now, 0, the removal's version}, or {DECLINED, now, 0} if
-- there was nothing to remove (or the one-shot is not done at that
-- revision); an error (nothing written) for a foreign value under
-- KEYS[1..5].
local refused = runtime_keys_refusal()
if refused then return refused end
local now = server_now()
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return {ST_DECLINED, now, 0}
end
if ARGV[3] then
  local entry = usable(KEYS[6], 'hash') and parse_entry(redis.call('HGET', KEYS[6], ARGV[1]))
  if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] or not entry or entry < tonumber(ARGV[3]) then
    return {ST_DECLINED, now, 0}
  end
end
local version = redis.call('INCR', KEYS[3])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZADD', KEYS[4], version, ARGV[1])
notify_runtime(KEYS[9])
return {ST_OK, now, 0, version}
