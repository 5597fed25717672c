-- Create or replace runtime definitions.  Each gets its own revision (the
-- new value of the version counter), written together with its definition,
-- its revision and its change entry; ``created`` survives a replacement.
-- The write owns the schedule's ledger entry and shape, in the same
-- script: a replacement with the same shape (the same ticks: only args,
-- kwargs, queue or options changed) keeps its entry, so its catch-up
-- survives a takeover; a new schedule, a re-add after a removal and a
-- replacement with another shape start at this write (entry = max(entry,
-- now), one history entry unless the id is new), so no tick of an earlier
-- definition fires under the new one and none of the new one's after the
-- write is lost.  The leader's sync reads these entries and never rebases.
--
-- KEYS[1] - the runtime hash (id -> definition JSON)
-- KEYS[2] - the revisions hash
-- KEYS[3] - the version counter
-- KEYS[4] - the changes sorted set
-- KEYS[5] - the ids sorted set
-- KEYS[6] - the ledger hash
-- KEYS[7] - the shapes hash
-- KEYS[8] - the history stream
-- KEYS[9] - the notification list the idle leader blocks on
-- ARGV[1] - the largest definition accepted, in bytes
-- ARGV[2] - the history cap
-- ARGV[3] - the condition: '' writes whatever is stored, 'new' only where
--           nothing is stored (create-only), a revision only where the
--           stored definition is at that revision (an update's compare)
-- ARGV[3k+1], ARGV[3k+2], ARGV[3k+3] - a schedule id, its definition JSON
--           without the closing brace (the script appends rev, revision,
--           created and updated), and its shape digest
-- Returns {OK, now, flags, rev1, created1, revision1, rev2, ...}: rev is
-- the fencing revision (the version counter), revision the schedule's own
-- count of writes (1 for a new schedule, also after a removal); an error
-- (nothing written) for a foreign value under KEYS[1..5], a malformed
-- definition, a failed condition ('EXISTS <id>' or 'CHANGED <id>'), or a
-- one-shot whose instant ("at") is not after the server's time
-- ('ERR at_past <id> <at> <now>': it would start after its only tick).
local refused = runtime_keys_refusal()
if refused then return refused end
local limit = tonumber(ARGV[1])
local condition = ARGV[3]
for i = 4, #ARGV, 3 do
  local id, body, shape = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if id == '' or body == nil or string.sub(body, 1, 7) ~= '{"v":1,' or #body > limit or not shape or shape == '' then
    return redis.error_reply('ERR malformed runtime schedule definition for ' .. id)
  end
  if condition == 'new' then
    if redis.call('HEXISTS', KEYS[1], id) == 1 then return redis.error_reply('EXISTS ' .. id) end
  elseif condition ~= '' and redis.call('HGET', KEYS[2], id) ~= condition then
    return redis.error_reply('CHANGED ' .. id)
  end
end
local now = server_now()
for i = 4, #ARGV, 3 do
  local body = ARGV[i + 1]
  if string.find(body, '"at":%d') then
    local ok, data = pcall(cjson.decode, body .. '}')
    local at = ok and type(data) == 'table' and data['at']
    if type(at) == 'number' and at <= now then
      return redis.error_reply(string.format('ERR at_past %s %d %d', ARGV[i], at, now))
    end
  end
end
local ledger_ok = usable(KEYS[6], 'hash') and usable(KEYS[7], 'hash')
local history_ok = usable(KEYS[8], 'stream')
local flags = 0
if not ledger_ok then flags = flags + C_TICKS end
if not history_ok then flags = flags + C_HISTORY end
local out = {ST_OK, now, flags}
for i = 4, #ARGV, 3 do
  local id, body, shape = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local created = string.format('%d', now)
  local revision = 1
  local old = redis.call('HGET', KEYS[1], id)
  if old then
    created = string.match(old, ',"created":(%d+),"updated":%d+}$') or created
    revision = (tonumber(string.match(old, ',"revision":(%d+),"created":%d+,"updated":%d+}$')) or 1) + 1
  end
  local rev = redis.call('INCR', KEYS[3])
  if ledger_ok then
    local entry = redis.call('HGET', KEYS[6], id)
    local tick = entry and tonumber(string.match(entry, '^(%-?%d+):%d+'))
    if not (old and tick and redis.call('HGET', KEYS[7], id) == shape) then
      local start = now
      if tick and tick > now then start = tick end
      if start ~= tick then
        redis.call('HSET', KEYS[6], id, string.format('%d', start) .. ':0:baseline')
      end
      redis.call('HSET', KEYS[7], id, shape)
      if entry and history_ok then
        local why = 'added again after its removal: it starts from this write'
        if old then
          why = 'replaced with other ticks (expression, interval, zone or bounds): it starts from this write'
        end
        redis.call('XADD', KEYS[8], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'schedule', id,
                   'tick', string.format('%d', start), 'outcome', O_REBASED, 'at', now,
                   'epoch', 0, 'detail', why, 'message_id', '')
      end
    end
  end
  redis.call('HSET', KEYS[1], id,
             body .. ',"rev":' .. rev .. ',"revision":' .. revision .. ',"created":' .. created ..
             ',"updated":' .. string.format('%d', now) .. '}')
  redis.call('HSET', KEYS[2], id, rev)
  redis.call('ZADD', KEYS[4], rev, id)
  redis.call('ZADD', KEYS[5], 0, id)
  out[#out + 1] = rev
  out[#out + 1] = tonumber(created)
  out[#out + 1] = revision
end
notify_runtime(KEYS[9])
return out
