-- Decide a batch of ticks, fenced.  For each entry the tick must be newer
-- than the schedule's last decided tick and not after the server's time.
-- A retry by the epoch that already decided this very tick is answered the
-- same way (the first reply may have been lost to a timeout).  Everything
-- is read and validated first and written after, so a failing script
-- leaves nothing half-written.
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the ledger hash
-- KEYS[3] - the history stream
-- KEYS[4] - the paused set
-- KEYS[5] - this batch's result record
-- KEYS[6] - the runtime definitions' revisions hash
-- KEYS[7] - the paused members' expiries (member -> until ms): a member
--           with one pauses only ticks before it, and is removed from the
--           paused set by the first claim that finds it expired
-- KEYS[8...] - the running marks of overlap="skip" schedules in the batch,
--              and the broker queues and message hashes of the messages
-- (The broker's keys do not share the scheduler's hash tag: a batch with
-- messages runs only on a plain Redis, which is all RedisBroker supports.)
-- ARGV[1] - the caller's token
-- ARGV[2] - the caller's epoch
-- ARGV[3] - the history cap
-- ARGV[4] - how far in the future a ledger entry may lie before it counts
--           as a clock-step artefact, ms
-- ARGV[5] - how long the result record is kept, ms
-- ARGV[6] - a JSON array of entries, each an array:
--           schedule id, tick ms, outcome, fire (1/0), detail, message id,
--           overlap ttl ms, the paused-set member of its whole actor
--           ('<actor>:*'), the index in KEYS of its running mark (0
--           without overlap), runtime revision (0 for declared),
--           and for a message to enqueue when granted (RedisBroker on this
--           Redis): the index in KEYS of its queue list and of its message
--           hash (0 and 0 without), its redis message id and the index in
--           ARGV of its body ("" and 0 without)
-- ARGV[7] - the caller's trusted now, ms (see sync.lua): an entry is in the
--           future only after both it and the server's time
-- ARGV[8] - 0: push the granted messages into their queues; else the index
--           in KEYS of the outbox hash to stage them in instead (durable
--           claims: publish.lua pushes them once replicas hold the claim),
--           each as redis message id -> '<queue key>\n<message hash key>\n<body>'
--           (optional: 0 when absent)
-- ARGV[9...] - the bodies of the messages (kept out of the JSON: neither
--              escaped by the caller nor unescaped here)
-- Returns {OK, now, flags, result...} (one result per entry, ClaimResult),
-- {DECLINED, now, flags} when the lease holds another token,
-- {BAD_REQUEST, now, 0, message} for a malformed request.
local now = server_now()
local flags = 0

-- A batch runs at most once.  A retry after a lost reply gets the first
-- run's answers (even if the lease moved on since); a batch the caller
-- has settled as never run ('void') is refused whole, writing nothing but
-- the record's expiry (every granted answer writes, so that a WAIT the
-- caller sends after it confirms the answer on replicas).
local ok, entries = pcall(cjson.decode, ARGV[6])
if not ok or type(entries) ~= 'table' then return {ST_BAD_REQUEST, now, 0, 'entries are not JSON'} end
for i, e in ipairs(entries) do
  if type(e) ~= 'table' or type(e[1]) ~= 'string' or type(e[2]) ~= 'number' or type(e[3]) ~= 'string'
     or (e[4] ~= 0 and e[4] ~= 1) or type(e[5]) ~= 'string' or type(e[6]) ~= 'string'
     or type(e[7]) ~= 'number' or type(e[8]) ~= 'string' or type(e[9]) ~= 'number'
     or (e[9] ~= 0 and (e[9] < 8 or KEYS[e[9]] == nil))
     or type(e[10]) ~= 'number' or type(e[11]) ~= 'number' or type(e[12]) ~= 'number'
     or (e[11] ~= 0 and (e[11] < 8 or KEYS[e[11]] == nil or e[12] < 8 or KEYS[e[12]] == nil
                         or type(e[13]) ~= 'string' or type(e[14]) ~= 'number' or e[14] < 9
                         or ARGV[e[14]] == nil)) then
    return {ST_BAD_REQUEST, now, 0, 'entry ' .. i .. ' is malformed'}
  end
end
local outbox = tonumber(ARGV[8] or '0') or -1
if outbox ~= 0 and (outbox < 8 or KEYS[outbox] == nil) then
  return {ST_BAD_REQUEST, now, 0, 'the outbox index is malformed'}
end
if usable(KEYS[5], 'string') then
  local prior = redis.call('GET', KEYS[5])
  if prior == 'void' then
    redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[5]))
    local out = {ST_OK, now, flags}
    for _ = 1, #entries do out[#out + 1] = R_REFUSED end
    return out
  end
  if prior and string.match(prior, '^[%-%d,]*$') then
    local out = {ST_OK, now, flags}
    for r in string.gmatch(prior, '[^,]+') do out[#out + 1] = tonumber(r) end
    if #out - 3 == #entries then
      redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[5]))
      return out
    end
  end
  if prior then flags = flags + C_BATCH end
else
  flags = flags + C_BATCH
end
if not usable(KEYS[1], 'hash') or redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {ST_DECLINED, now, flags} end
local ticks_ok = usable(KEYS[2], 'hash')
if not ticks_ok then flags = flags + C_TICKS end
local history_ok = usable(KEYS[3], 'stream')
if not history_ok then flags = flags + C_HISTORY end
local paused_ok = usable(KEYS[4], 'set')
if not paused_ok then flags = flags + C_PAUSED end
local revs_ok = usable(KEYS[6], 'hash')
if not revs_ok then flags = flags + C_RUNTIME_REVS end
local epoch = ARGV[2]
local future = math.max(now, tonumber(ARGV[7]) or now) + tonumber(ARGV[4])
-- Most of the time nothing is paused: skip two lookups per entry then.
local any_paused = paused_ok and redis.call('SCARD', KEYS[4]) > 0
local until_ok = usable(KEYS[7], 'hash')
local expired = {}
-- Whether MEMBER of the paused set pauses TICK: it is a member, with no
-- expiry or an expiry after the tick.
local function pauses(member, tick)
  if redis.call('SISMEMBER', KEYS[4], member) == 0 then return false end
  local expiry = until_ok and tonumber(redis.call('HGET', KEYS[7], member) or '')
  if not expiry then return true end
  if expiry <= now then expired[member] = true end
  return tick < expiry
end

-- Decide everything in memory first.
local last, by, stored = {}, {}, {}
local results, writes, marks, events, pushes = {}, {}, {}, {}, {}
for i, e in ipairs(entries) do
  local sid, tick, outcome, fire = e[1], e[2], e[3], e[4]
  local result
  if last[sid] == nil then
    local v = nil
    if ticks_ok then v = redis.call('HGET', KEYS[2], sid) end
    local t, b, r = parse_entry(v)
    if t == nil or t > future then
      last[sid] = false
    else
      last[sid], by[sid], stored[sid] = t, b, r
    end
  end
  if last[sid] == false then
    result = R_LOST
  elseif e[10] > 0 and (not revs_ok or tonumber(redis.call('HGET', KEYS[6], sid) or '') ~= e[10]) then
    result = R_GONE
  elseif tick > now then
    result = R_NOT_YET
  elseif tick < last[sid] or (tick == last[sid] and by[sid] ~= epoch) then
    result = R_REFUSED
  elseif tick == last[sid] then
    result = stored[sid] or R_REFUSED
  else
    result = R_RECORDED
    if fire == 1 then
      if any_paused and (pauses(sid, tick) or pauses(e[8], tick)) then
        result = R_PAUSED
        outcome = O_PAUSED
      elseif e[9] > 0 and (marks[KEYS[e[9]]] ~= nil or redis.call('EXISTS', KEYS[e[9]]) == 1) then
        -- The previous message (of an earlier batch, or of this one) is
        -- still queued or running.
        result = R_SKIPPED
        outcome = O_SKIPPED
      else
        result = R_FIRE
        if e[9] > 0 then marks[KEYS[e[9]]] = {e[6], e[7]} end
        if e[11] > 0 then pushes[#pushes + 1] = e end
      end
    end
    last[sid], by[sid], stored[sid] = tick, epoch, result
    writes[sid] = tick .. ':' .. epoch .. ':' .. result
    events[#events + 1] = {sid, tick, outcome, e[5], e[6]}
  end
  results[i] = result
end

-- Writes start here.
if not history_ok then redis.call('DEL', KEYS[3]) end
if not ticks_ok then redis.call('DEL', KEYS[2]) end
local hset = {}
for sid, v in pairs(writes) do
  hset[#hset + 1] = sid
  hset[#hset + 1] = v
  if #hset >= 1000 then
    redis.call('HSET', KEYS[2], unpack(hset))
    hset = {}
  end
end
if #hset > 0 then redis.call('HSET', KEYS[2], unpack(hset)) end
-- Pauses whose instant has passed end here, under the lease.
for member in pairs(expired) do
  redis.call('SREM', KEYS[4], member)
  redis.call('HDEL', KEYS[7], member)
end
for key, mark in pairs(marks) do
  redis.call('SET', key, mark[1], 'PX', mark[2])
end
local maxlen = tonumber(ARGV[3])
for _, ev in ipairs(events) do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*',
             'schedule', ev[1], 'tick', ev[2], 'outcome', ev[3], 'at', now,
             'epoch', epoch, 'detail', ev[4], 'message_id', ev[5])
end
-- The granted messages, in dramatiq's layout: recorded as fired if and
-- only if in the queue (or staged in the outbox, from which they reach the
-- queue once the claim is durable).
-- One HSET and one RPUSH per queue, in chunks of 500: a burst of a
-- thousand messages costs a few calls, not two thousand.
local bodies, ids, hashes, queues = {}, {}, {}, {}
local function flush(q)
  if #ids[q] > 0 then
    if outbox ~= 0 then
      redis.call('HSET', KEYS[outbox], unpack(bodies[q]))
    else
      redis.call('HSET', KEYS[hashes[q]], unpack(bodies[q]))
      redis.call('RPUSH', KEYS[q], unpack(ids[q]))
    end
    bodies[q], ids[q] = {}, {}
  end
end
for _, e in ipairs(pushes) do
  local q = e[11]
  if not ids[q] then
    ids[q], bodies[q], hashes[q] = {}, {}, e[12]
    queues[#queues + 1] = q
  end
  local b, i = bodies[q], ids[q]
  b[#b + 1] = e[13]
  if outbox ~= 0 then
    b[#b + 1] = KEYS[q] .. '\n' .. KEYS[e[12]] .. '\n' .. ARGV[e[14]]
  else
    b[#b + 1] = ARGV[e[14]]
  end
  i[#i + 1] = e[13]
  if #i >= 500 then flush(q) end
end
for _, q in ipairs(queues) do flush(q) end
-- Keep the per-entry results, so a caller whose reply was lost to a
-- timeout can learn whether this batch ran and what it granted.
local out = {ST_OK, now, flags}
local record = {}
for i = 1, #results do
  out[#out + 1] = results[i]
  record[i] = tostring(results[i])
end
redis.call('DEL', KEYS[5])
redis.call('SET', KEYS[5], table.concat(record, ','), 'PX', tonumber(ARGV[5]))
return out
