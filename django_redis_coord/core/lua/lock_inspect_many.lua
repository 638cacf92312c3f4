-- Read the holders of many locks in one call (the listing's second round trip); read-only.
-- KEYS: for each lock, its name, meta hash and queue zset (three keys per lock).
-- Returns one string: the server's now in ms, then one record per lock, each written as
-- "<length>:<record>".  A record is "-2" when nobody holds the lock, else
-- "<pttl> <fence> <since> <queue length> <token length> <token><holder info>" (pttl -1: no
-- expiry; "-" for an unknown fence or grant time).  One string parses far faster on the client
-- than thousands of array items.
local now_text = int(server_now())
local parts = {#now_text .. ':' .. now_text}
local count = 1

for i = 1, #KEYS, 3 do
  local name, meta, queue = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  -- pcall: a key of another type under this name (a semaphore, a cache entry) is not a lock.
  local token = redis.pcall('GET', name)
  local record = '-2'
  if token and type(token) ~= 'table' then
    local f = redis.call('HMGET', meta, 'token', 'fence', 'info', 'since')
    local info, since = '', '-'
    if f[1] == token then
      info, since = f[3] or '', f[4] or '-'
    end
    record = tostring(redis.call('PTTL', name)) .. ' ' .. (f[2] or '-') .. ' ' .. since .. ' '
      .. tostring(redis.call('ZCARD', queue)) .. ' ' .. #token .. ' ' .. token .. info
  end
  count = count + 1
  parts[count] = #record .. ':' .. record
end
return table.concat(parts)
