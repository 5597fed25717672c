-- Delete an overlap="skip" schedule's running mark only if it still names
-- this message: a mark that expired and was set again by a later tick
-- belongs to that later message.
--
-- KEYS[1] - the running mark, {prefix}:running:<schedule id>
-- ARGV[1] - the message id
-- Returns {OK, now, 0} when the mark was removed, {DECLINED, now, 0}
-- otherwise.
local now = server_now()
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('DEL', KEYS[1]) == 1 then
  return {ST_OK, now, 0}
end
return {ST_DECLINED, now, 0}
