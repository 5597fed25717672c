-- Enqueue one message on a RedisBroker, idempotently: a second push of
-- the same tick (redis-py's retry of a timed-out call, or the scheduler's
-- own retry of an owed tick) finds the mark and does nothing.  The layout
-- is dramatiq's own: the body in '<namespace>:<queue>.msgs' under its
-- redis message id, the id pushed on '<namespace>:<queue>'.
--
-- KEYS[1] - the tick's enqueue mark
-- KEYS[2] - the queue's message hash
-- KEYS[3] - the queue list
-- ARGV[1] - the redis message id
-- ARGV[2] - the encoded message
-- ARGV[3] - how long the mark is kept, ms (at least the catch-up window)
-- Returns {OK, now, 0} enqueued, {DECLINED, now, 0} already enqueued.
local now = server_now()
if not usable(KEYS[1], 'string') then redis.call('DEL', KEYS[1]) end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[3])) then return {ST_DECLINED, now, 0} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
return {ST_OK, now, 0}
