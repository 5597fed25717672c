-- Write the leader's health decisions, fenced: the health of the
-- schedules that changed, the cursor the decisions reached, the open runs
-- added (fired ticks) and removed (started, finished or overdue), the
-- run records of fired ticks (pending) and of overdue runs (lost), and the
-- alerts, appended to the outbox in the same atomic step as the change
-- they announce, so a new leader neither loses nor repeats one.
--
-- KEYS[1] - the lease hash
-- KEYS[2] - the health hash
-- KEYS[3] - the health cursor hash (field events)
-- KEYS[4] - the open runs sorted set
-- KEYS[5] - on_alert's alert outbox list
-- KEYS[6] - the webhook's alert outbox list
-- KEYS[7] - the newest run of every schedule, hash
-- KEYS[8...] - the runs hashes and runs order sorted sets named by ARGV[2].runs
-- ARGV[1] - the caller's token
-- ARGV[2] - JSON {cursor, health: {schedule id: JSON}, add: [[member, score]...],
--           remove: [member...], alerts: [JSON...], runs: [[schedule id, tick (a string),
--           'pending' or 'lost', index in KEYS of its runs hash, of its order set]...],
--           keep: runs kept per schedule, alerts_cap: each outbox's cap,
--           outboxes: the indexes in KEYS of the outboxes the alerts go to (5, 6)}
-- Returns {OK, now, 0} when written, {DECLINED, now, 0} when the lease holds
-- another token (nothing written).
local now = server_now()
if not usable(KEYS[1], 'hash') or redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return {ST_DECLINED, now, 0}
end
local w = cjson.decode(ARGV[2])
if not usable(KEYS[2], 'hash') then redis.call('DEL', KEYS[2]) end
if not usable(KEYS[4], 'zset') then redis.call('DEL', KEYS[4]) end
if not usable(KEYS[7], 'hash') then redis.call('DEL', KEYS[7]) end
for sid, json in pairs(w.health) do redis.call('HSET', KEYS[2], sid, json) end
if not usable(KEYS[3], 'hash') then redis.call('DEL', KEYS[3]) end
if w.cursor ~= cjson.null and w.cursor then redis.call('HSET', KEYS[3], 'events', w.cursor) end
for _, m in ipairs(w.remove) do redis.call('ZREM', KEYS[4], m) end
for _, a in ipairs(w.add) do redis.call('ZADD', KEYS[4], a[2], a[1]) end
for _, r in ipairs(w.runs) do
  local runs, order = KEYS[r[4]], KEYS[r[5]]
  if usable(runs, 'hash') and usable(order, 'zset') then
    local tick = r[2]
    local stored = redis.call('HGET', runs, tick)
    if r[3] == 'pending' and not stored then
      put_run(runs, order, KEYS[7], r[1], tick, cjson.encode({tick = tonumber(tick), outcome = 'pending', attempt = 1}), w.keep)
    elseif r[3] == 'lost' and stored then
      local ok, record = pcall(cjson.decode, stored)
      if ok and type(record) == 'table' and record['outcome'] == 'running' then
        record['outcome'] = 'lost'
        put_run(runs, order, KEYS[7], r[1], tick, cjson.encode(record), w.keep)
      end
    end
  end
end
if #w.alerts > 0 then
  for _, index in ipairs(w.outboxes) do
    local outbox = KEYS[index]
    if not usable(outbox, 'list') then redis.call('DEL', outbox) end
    for _, a in ipairs(w.alerts) do redis.call('RPUSH', outbox, a) end
    redis.call('LTRIM', outbox, -w.alerts_cap, -1)
  end
end
return {ST_OK, now, 0}
