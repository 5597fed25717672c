-- Publish staged messages (durable claims): push each one still in the
-- outbox into its queue, in dramatiq's layout, and drop it from the
-- outbox, so a second publish of the same message (by the claimer, a
-- retry, or the next leader draining the outbox) does nothing.  Called
-- only once replicas hold the claim that staged it.  Not fenced: what a
-- durable claim granted is for whoever publishes it first.
--
-- KEYS[1] - the outbox hash (redis message id -> '<queue key>\n<message
--           hash key>\n<body>')
-- KEYS[2...] - the queue lists and message hashes of the messages
-- ARGV[1...] - the redis message ids to publish
-- Returns {OK, now, 0, published...}: per id 1 when this call pushed it,
-- 0 when it was not staged (already published, or never staged).
local now = server_now()
if not usable(KEYS[1], 'hash') then return {ST_BAD_REQUEST, now, 0, 'the outbox is not a hash'} end
local out = {ST_OK, now, 0}
for _, id in ipairs(ARGV) do
  local v = redis.call('HGET', KEYS[1], id)
  local published = 0
  if v then
    local queue, hash, body = string.match(v, '^([^\n]*)\n([^\n]*)\n(.*)$')
    if queue then
      redis.call('HSET', hash, id, body)
      redis.call('RPUSH', queue, id)
      published = 1
    end
    redis.call('HDEL', KEYS[1], id)
  end
  out[#out + 1] = published
end
return out
