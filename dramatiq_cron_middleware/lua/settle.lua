-- Settle a batch whose reply was lost: its results if it ran; otherwise
-- void it, so that a copy of the claim still in flight can never run.
--
-- KEYS[1] - the batch's result record
-- ARGV[1] - how long a void mark is kept, ms
-- Returns the comma-separated results, or false when the batch never ran.
if not usable(KEYS[1], 'string') then redis.call('DEL', KEYS[1]) end
local v = redis.call('GET', KEYS[1])
if v and v ~= 'void' and string.match(v, '^[%-%d,]*$') then return v end
redis.call('SET', KEYS[1], 'void', 'PX', tonumber(ARGV[1]))
return false
