-- Leave the wait queue (a blocking acquire gave up).  A permit handed to the caller in the
-- meantime is kept (with its full lease); a free permit the caller was first in line for goes to
-- the next waiter.
-- KEYS and ARGV as for sem_acquire.lua; ARGV[3] "3" gives up and gives back: an interrupted
-- acquire leaves the queue and returns the permit its token holds (a grant whose reply it never
-- read), in this one call, safe to run again.
-- Returns {1, fence, pttl, 0} when the caller holds a permit, else {0, ms until the earliest lease
-- ends (-1: none ends), the limit in force}, as sem_acquire.lua does.
local permits, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl, member, retention = ARGV[1], tonumber(ARGV[2]), ARGV[6], tonumber(ARGV[10])
local give_back = ARGV[3] == '3'
local now_ms, now_us = server_now()
redis.call('ZREM', queue, token)
redis.call('HDEL', waiters, token)
sem_reclaim(permits, meta, now_ms)
local score = redis.call('ZSCORE', permits, token)
if score then
  if not give_back then
    local fence, pttl = sem_claim(permits, meta, registry, member, token, ttl, now_ms)
    sem_expire(permits, meta, retention, now_ms)
    return {1, fence, pttl, 0}
  end
  redis.call('ZREM', permits, token)  -- returned as sem_release.lua does
  redis.call('HDEL', meta, 'p:' .. token)
end
local limit = tonumber(redis.call('HGET', meta, 'limit') or '0')
sem_hand_off(permits, meta, queue, waiters, registry, member, limit, now_ms, now_us, nil)
local wait_ms = sem_next_end(permits, now_ms) or -1
sem_settle(permits, meta, registry, member, score, retention, now_ms)
return {0, wait_ms, limit}
