-- Read the live permits of many semaphores in one call (the listing's second round trip); read-only.
-- KEYS: for each semaphore, its permits zset, meta hash and queue zset (three keys each).
-- Returns one string: the server's now in ms, then one record per semaphore, each written as
-- "<length>:<record>".  A record is "<limit or -> <live permits> <queue length> " followed by
-- one "<length>:<permit>" per live permit, oldest grant first; a permit is
-- "<pttl> <fence> <since> <queue length> <token length> <token><holder info>" (pttl -1: no expiry).
local now_ms = server_now()
local now_text = int(now_ms)
local parts = {#now_text .. ':' .. now_text}
local count = 1

for i = 1, #KEYS, 3 do
  local permits, meta, queue = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  -- pcall: a key of another type under this name (a lock, a cache entry) holds no permits.
  local entries = redis.pcall('ZRANGEBYSCORE', permits, '(' .. now_text, '+inf', 'WITHSCORES')
  if entries.err then
    entries = {}
  end
  local limit = redis.call('HGET', meta, 'limit') or '-'
  local waiting = tostring(redis.call('ZCARD', queue))
  local held = {}
  for j = 1, #entries, 2 do
    local token = entries[j]
    local left = sem_left(entries[j + 1], now_ms) or -1
    local fence, since, _, info = sem_record(redis.call('HGET', meta, 'p:' .. token) or '0 0 0 {}')
    local permit = int(left) .. ' ' .. int(fence) .. ' ' .. int(since) .. ' ' .. waiting .. ' ' .. #token .. ' '
      .. token .. info
    held[#held + 1] = #permit .. ':' .. permit
  end
  local record = limit .. ' ' .. (#entries / 2) .. ' ' .. waiting .. ' ' .. table.concat(held)
  count = count + 1
  parts[count] = #record .. ':' .. record
end
return table.concat(parts)
