-- Read a semaphore in one atomic step, without changing it.
-- KEYS[1] permits zset   KEYS[2] meta hash   KEYS[3] queue zset
-- ARGV[1] "count" for the number of live permits and the limit only, "full" for every permit too.
-- Returns {server now ms, limit or false, live permits, queue length, last fence or false,
-- then for each live permit (full only): token, pttl (-1: no expiry), record "fence since claim info"}.
local permits, meta, queue = KEYS[1], KEYS[2], KEYS[3]
local now_ms = server_now()
local fields = redis.call('HMGET', meta, 'limit', 'fence')
local live = redis.call('ZCOUNT', permits, '(' .. int(now_ms), '+inf')
local out = {int(now_ms), fields[1], live, redis.call('ZCARD', queue), fields[2]}
if ARGV[1] == 'full' then
  local entries = redis.call('ZRANGEBYSCORE', permits, '(' .. int(now_ms), '+inf', 'WITHSCORES')
  for i = 1, #entries, 2 do
    local token = entries[i]
    out[#out + 1] = token
    out[#out + 1] = sem_left(entries[i + 1], now_ms) or -1
    out[#out + 1] = redis.call('HGET', meta, 'p:' .. token) or false
  end
end
return out
