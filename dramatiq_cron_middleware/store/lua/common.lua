-- Functions every script shares.

-- The server's clock in epoch milliseconds.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether KEY is absent or of type WANTED ('hash', 'zset', 'set',
-- 'stream', 'string', 'list').  A key of another type is corrupt: the
-- scripts treat it as missing rather than fail half-way.
local function usable(key, wanted)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t['ok'] end
  return t == 'none' or t == wanted
end

-- Parse a ledger value '<tick>:<epoch>[:<result>|:baseline]' (the grammar
-- of codes.py).  Returns tick, epoch (a string), result (a number or
-- nil) or nil when the value does not follow the grammar.
local function parse_entry(v)
  if type(v) ~= 'string' or #v > 40 then return nil end
  local tick, epoch, tail = string.match(v, '^(%-?%d+):(%d+)(.*)$')
  if not tick or #tick > 16 or #epoch > 15 then return nil end
  local result = nil
  if tail == ':baseline' then
    result = nil
  elseif tail ~= '' then
    local r = string.match(tail, '^:(%-?%d)$')
    if not r then return nil end
    result = tonumber(r)
  end
  return tonumber(tick), epoch, result
end

-- An integer from a string of digits, or nil.
local function integer(v)
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') or #v > 16 then return nil end
  return tonumber(v)
end
