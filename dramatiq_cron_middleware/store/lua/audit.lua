-- Record operator actions (add, update, remove, pause, resume, trigger) in
-- the history stream, with the server's clock and the lease's epoch, so
-- they sort with the leader's tick outcomes whatever the operator's clock
-- says.
--
-- KEYS[1] - the history stream
-- KEYS[2] - the lease hash (its epoch is recorded)
-- ARGV[1] - the history cap
-- ARGV[2] - who acted ("api", "cli", or the dashboard's user)
-- ARGV[3+5k], ..., ARGV[7+5k] - one entry each: the schedule id (or
--           '<actor>:*'), the tick in ms ('' meaning now), the action (its
--           outcome), the detail (what changed), the message id
-- Returns {OK, now, 0}.
local now = server_now()
local epoch = redis.call('HGET', KEYS[2], 'epoch') or ''
for i = 3, #ARGV, 5 do
  local tick = ARGV[i + 1]
  if tick == '' then tick = now end
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
             'schedule', ARGV[i], 'tick', tick, 'outcome', ARGV[i + 2], 'at', now,
             'epoch', epoch, 'detail', ARGV[i + 3], 'message_id', ARGV[i + 4], 'who', ARGV[2])
end
return {ST_OK, now, 0}
