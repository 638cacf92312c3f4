-- Read the holder of a lock in one atomic step.
-- KEYS[1] name   KEYS[2] meta hash   KEYS[3] queue zset
-- Returns {token or false, pttl, fence, info, since ms, queue length, server now ms}.
local name, meta, queue = KEYS[1], KEYS[2], KEYS[3]
local token = redis.call('GET', name)
local fields = redis.call('HMGET', meta, 'fence', 'info', 'since', 'token')
local info, since = false, false
if token and fields[4] == token then
  info, since = fields[2], fields[3]
end
local now_ms = server_now()
return {token, redis.call('PTTL', name), fields[1], info, since, redis.call('ZCARD', queue), int(now_ms)}
