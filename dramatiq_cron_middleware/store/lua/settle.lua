-- Settle a batch whose reply was lost: its results if it ran; otherwise
-- void it, so that a copy of the claim still in flight can never run.  A
-- record that does not parse (a stray write, a bad restore) is reported,
-- and the results are read back from the ledger instead: a claim granted
-- to this epoch left its tick and epoch there.
--
-- KEYS[1] - the batch's result record
-- KEYS[2] - the ledger hash
-- ARGV[1] - how long a void mark is kept, ms
-- ARGV[2] - the caller's epoch
-- ARGV[3] - a JSON array of the batch's [schedule id, tick ms, fire (1/0)]
--           ('[]' if unknown)
-- Returns {OK, now, flags, results} when it ran (results joined by commas;
-- flags has C_BATCH when the record was unusable and the results were read
-- back from the ledger), {DECLINED, now, 0} when it never ran (now void).
-- Every answer writes (at least the record's expiry), so that a WAIT the
-- caller sends after it confirms the answer on replicas.
local now = server_now()
local record_ok = usable(KEYS[1], 'string')
local v = nil
if record_ok then v = redis.call('GET', KEYS[1]) end
if v and v ~= 'void' and string.match(v, '^[%-%d,]*$') then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
  return {ST_OK, now, 0, v}
end
if v == 'void' then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
  return {ST_DECLINED, now, 0}
end
if not v and record_ok then
  redis.call('SET', KEYS[1], 'void', 'PX', tonumber(ARGV[1]))
  return {ST_DECLINED, now, 0}
end
-- Unusable: reconstruct from the ledger what this epoch was granted.  The
-- ledger holds only a schedule's newest decided tick: when that tick is
-- one of this batch's, decided by this epoch, the batch ran and decided its
-- earlier ticks of that schedule too (a catch-up "each" grants several):
-- a missed one was recorded, a firing one shared the newest one's fate
-- (fired, or paused, or skipped for overlap).
local ok, entries = pcall(cjson.decode, ARGV[3])
local out = {}
if ok and type(entries) == 'table' and usable(KEYS[2], 'hash') then
  local in_batch, last = {}, {}
  for _, e in ipairs(entries) do
    if type(e) == 'table' and type(e[1]) == 'string' and type(e[2]) == 'number' then
      in_batch[e[1] .. ':' .. e[2]] = true
      if last[e[1]] == nil then
        local tick, epoch, stored = parse_entry(redis.call('HGET', KEYS[2], e[1]))
        last[e[1]] = {tick, epoch, stored}
      end
    end
  end
  for _, e in ipairs(entries) do
    local result = R_REFUSED
    local l = type(e) == 'table' and last[e[1]]
    if l and l[2] == ARGV[2] and l[3] then
      if l[1] == e[2] then
        result = l[3]
      elseif l[1] > e[2] and in_batch[e[1] .. ':' .. l[1]] then
        if e[3] == 0 then
          result = R_RECORDED
        elseif l[3] == R_FIRE or l[3] == R_PAUSED or l[3] == R_SKIPPED then
          result = l[3]
        end
      end
    end
    out[#out + 1] = tostring(result)
  end
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], 'void', 'PX', tonumber(ARGV[1]))
return {ST_OK, now, C_BATCH, table.concat(out, ',')}
