-- Release a lock whoever holds it (an operator's action), fence its holder out and hand the lock
-- to the first live waiter.
-- KEYS[1] name   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] registry member   ARGV[2] metadata retention ms
-- ARGV[3] the holder's fence to release ("" = whoever holds it)
-- Returns {status, released holder's fence, fence counter after the bump, next holder's token or false}:
-- status 1 released, 0 nobody held the lock, -1 held under another fence than ARGV[5] (unchanged).
local name, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, retention, expected = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fence = redis.call('HGET', meta, 'fence') or '0'
if not redis.call('GET', name) then
  redis.call('ZREM', registry, member)
  registry_removed(registry)
  return {0, fence, fence, false}
end
if expected ~= '' and expected ~= fence then
  return {-1, fence, fence, false}
end
local now_ms, now_us = server_now()
redis.call('DEL', name)
redis.call('HDEL', meta, 'token', 'info', 'since', 'ttl')
redis.call('HSET', meta, 'forced_at', int(now_ms), 'forced_fence', fence)
redis.call('ZREM', registry, member)
-- Move the counter past the released hold: every later grant, and every check against the
-- lock's current fence, now refuses the old holder.
local bumped = next_fence(meta, now_us)
local heir = hand_off(name, meta, queue, waiters, registry, member, now_ms, now_us, retention, nil)
registry_removed(registry)
return {1, fence, int(bumped), heir or false}
