-- Set the limit of a semaphore.  Raising it hands the new permits to waiting callers at once;
-- lowering it only stops new grants (current holders keep their permits).
-- KEYS[1] permits zset   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] limit   ARGV[2] registry member   ARGV[3] metadata retention ms (see sem_expire())
-- Returns the number of live permits, or -2 (nothing written) when the name holds another kind of
-- value (a lock's token).
local permits, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit, member, retention = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if sem_foreign(permits) then
  return -2
end
local now_ms, now_us = server_now()
redis.call('HSET', meta, 'limit', int(limit))
sem_reclaim(permits, meta, now_ms)
sem_hand_off(permits, meta, queue, waiters, registry, member, limit, now_ms, now_us, nil)
sem_publish(permits, registry, member, nil, now_ms)
sem_expire(permits, meta, retention, now_ms)
return redis.call('ZCARD', permits)
