-- Claim one delivery of a cron message for deduplication.  The mark is
-- '<attempt>|<token>'.  The caller may run the message when there is no
-- mark for this attempt or a later one (a retry claims over the failed
-- attempt's mark), or the mark is the caller's own (its first claim ran
-- but the reply was lost and redis-py resent it).  A mark that does not
-- parse is taken for missing and overwritten.
--
-- KEYS[1] - the message's mark, {prefix}:dedup:<message id>
-- ARGV[1] - the attempt: dramatiq's retries option (0, then 1, 2... per retry)
-- ARGV[2] - the caller's claim token, random per processing of a delivery
-- ARGV[3] - the mark's TTL, ms
-- Returns {OK, now, 0} when the caller may run the message, {DECLINED,
-- now, 0} when another delivery claimed this attempt or a later one (a
-- duplicate).
local now = server_now()
local mark = redis.call('GET', KEYS[1])
if mark then
  local attempt, token = string.match(mark, '^(%d+)|(.*)$')
  if attempt and tonumber(attempt) >= tonumber(ARGV[1]) then
    if token == ARGV[2] then
      return {ST_OK, now, 0}
    end
    return {ST_DECLINED, now, 0}
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])
return {ST_OK, now, 0}
