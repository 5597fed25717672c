-- Delete an overlap="skip" schedule's running mark only if it still names
-- this message: a mark that expired and was set again by a later tick
-- belongs to that later message.
--
-- KEYS[1] - the running mark, {prefix}:running:<schedule id>
-- ARGV[1] - the message id
-- Returns 1 when the mark was removed, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
