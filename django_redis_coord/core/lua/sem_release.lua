-- Return the permit held with ARGV[1] and hand free permits to the first live waiters.
-- KEYS[1] permits zset   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] token   ARGV[2] registry member   ARGV[3] metadata retention ms (see sem_expire())
-- Returns 1 when released, 0 when the token holds no live permit (never had one, or its lease ended).
local permits, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, member, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now_ms, now_us = server_now()
local released = 0
local score = redis.call('ZSCORE', permits, token)
if score then
  local left = sem_left(score, now_ms)
  if not left or left > 0 then released = 1 end
  redis.call('ZREM', permits, token)
  redis.call('HDEL', meta, 'p:' .. token)
end
if redis.call('EXISTS', queue) == 0 then
  sem_settle(permits, meta, registry, member, score, retention, now_ms)
  return released
end
-- The slow path: the helpers only it uses are defined from here.
sem_reclaim(permits, meta, now_ms)
local limit = tonumber(redis.call('HGET', meta, 'limit') or '0')
sem_hand_off(permits, meta, queue, waiters, registry, member, limit, now_ms, now_us, nil)
sem_settle(permits, meta, registry, member, score, retention, now_ms)
return released
