-- Append an operator's entry (a manual trigger, or an action such as a
-- pause) to the history with the server's clock, so its time sorts with
-- the leader's entries whatever the operator's clock says.
--
-- KEYS[1] - the history stream
-- KEYS[2] - the lease hash (its epoch is recorded)
-- ARGV[1] - the history cap
-- ARGV[2] - the schedule id
-- ARGV[3] - the tick, ms
-- ARGV[4] - the outcome
-- ARGV[5] - the detail
-- ARGV[6] - the message id
-- Returns {OK, now, 0}.
local now = server_now()
local epoch = redis.call('HGET', KEYS[2], 'epoch') or ''
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
           'schedule', ARGV[2], 'tick', ARGV[3], 'outcome', ARGV[4], 'at', now,
           'epoch', epoch, 'detail', ARGV[5], 'message_id', ARGV[6])
return {ST_OK, now, 0}
