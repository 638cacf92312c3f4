-- Take back one permit of a semaphore whoever holds it (an operator's action), fence its holder
-- out and hand free permits to the first live waiters.  The permit is named by its fence: an
-- operator confirms a particular grant, and never sees the holder's token.
-- KEYS[1] permits zset   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] registry member   ARGV[2] the permit's fence   ARGV[3] metadata retention ms (see sem_expire())
-- Returns {status, released permit's fence, fence counter after the bump, whether a waiter got a permit}:
-- status 1 released, 0 no live permit has that fence.
local permits, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, expected, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms, now_us = server_now()
local last = redis.call('HGET', meta, 'fence') or '0'
local victim = sem_token_of_fence(meta, redis.call('ZRANGEBYSCORE', permits, '(' .. int(now_ms), '+inf'), expected)
if not victim then
  return {0, ARGV[2], last, false}
end
redis.call('ZREM', permits, victim)
redis.call('HDEL', meta, 'p:' .. victim)
redis.call('HSET', meta, 'forced_at', int(now_ms), 'forced_fence', ARGV[2])
-- Move the counter past the released permit: every later grant is above it.
local bumped = next_fence(meta, now_us)
sem_reclaim(permits, meta, now_ms)
local limit = tonumber(redis.call('HGET', meta, 'limit') or '0')
-- Whether a waiter was granted a permit (dead waiters dropped from the queue on the way do not count).
local _, heir = sem_hand_off(permits, meta, queue, waiters, registry, member, limit, now_ms, now_us, nil)
sem_publish(permits, registry, member, nil, now_ms)
sem_expire(permits, meta, retention, now_ms)
return {1, ARGV[2], int(bumped), heir}
