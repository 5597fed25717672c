-- Owed ticks (granted, enqueue failed) checked before a retry: a tick whose
-- definition was removed or replaced since its claim is dropped, and
-- recorded in the history, so that removal stays final for them too.
--
-- KEYS[1] - the revisions hash
-- KEYS[2] - the history stream
-- ARGV[1] - the history cap
-- ARGV[4k-2..4k+1] - a schedule id, the revision its tick was claimed
--           under, the tick (ms) and the message id
-- Returns {OK, now, flags, then one 1 (dropped) or 0 (still current) per
-- tick}.
local now = server_now()
local history_ok = usable(KEYS[2], 'stream')
local out = {ST_OK, now, 0}
if not history_ok then out[3] = C_HISTORY end
for i = 2, #ARGV, 4 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
    if history_ok then
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(ARGV[1]), '*', 'schedule', ARGV[i], 'tick', ARGV[i + 2],
                 'outcome', O_DROPPED, 'at', now, 'epoch', 0,
                 'detail', 'its enqueue had failed, and the definition was removed or replaced before a retry',
                 'message_id', ARGV[i + 3])
    end
  end
end
return out
