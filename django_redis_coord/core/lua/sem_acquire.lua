-- Take a permit of a semaphore, or join (and refresh a place in) its FIFO wait queue.
-- KEYS[1] permits zset at the name (token -> lease end ms)   KEYS[2] meta hash   KEYS[3] queue zset
-- KEYS[4] waiters hash (token -> waiter record, see parse_waiter())   KEYS[5] registry
-- ARGV[1] token   ARGV[2] lease ms (0 = no expiry)   ARGV[3] "0" try only, "1" queue when full,
--   "2" queue when full and the caller may already be queued (a retry: clean up its old state)
-- ARGV[4] waiter lease ms   ARGV[5] holder info (JSON)   ARGV[6] registry member
-- ARGV[7] the channel the caller's process listens on   ARGV[8] "<waiter number>.<attempt>" there
-- ARGV[9] limit to store when none is ("" = none)   ARGV[10] metadata retention ms (see sem_expire())
-- Returns {1, fence, pttl, 0} when the caller holds a permit (pttl -1: no expiry), {0, ms until the
-- earliest lease ends (-1: none ends), the limit in force} when it does not (queued when asked
-- to), and {-1}
-- (nothing written) when the semaphore has no limit, {-2} (nothing written) when the name holds
-- another kind of value (a lock's token).
local permits, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mode = tonumber(ARGV[3]) % 4  -- + 4: the library made the token (a permit held with it is ours anyway)
local token, ttl, enqueue, retry, lease = ARGV[1], tonumber(ARGV[2]), mode ~= 0, mode == 2, tonumber(ARGV[4])
local info, member, channel, id, retention = ARGV[5], ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[10])

local state = redis.call('HMGET', meta, 'limit', 'fence')
local limit = tonumber(state[1])
if not limit then
  if ARGV[9] == '' then
    return {-1}
  end
  if sem_foreign(permits) then
    return {-2}
  end
  limit = tonumber(ARGV[9])
  redis.call('HSET', meta, 'limit', ARGV[9])
end
local now_ms, now_us = server_now()
if not sem_reclaim(permits, meta, now_ms) then
  return {-2}
end

local held = redis.call('ZSCORE', permits, token)
local queued = redis.call('EXISTS', queue) == 1  -- the queue and the waiter records expire together
-- Give the caller a permit after the fence `last`; it waits no more (also when this identity was
-- queued by another call).
local function take(last)
  if queued then
    redis.call('ZREM', queue, token)
    redis.call('HDEL', waiters, token)
  end
  local fence, expiry = sem_grant(permits, meta, token, ttl, 0, info, now_ms, now_us, last)
  sem_publish(permits, registry, member, expiry, now_ms)
  sem_expire(permits, meta, retention, now_ms)
  if ttl > 0 then return {1, fence, ttl, 0} end
  return {1, fence, -1, 0}
end
if not held and not queued and redis.call('ZCARD', permits) < limit then
  return take(state[2])  -- nobody waits and a permit is free
end
-- The slow path: the helpers only it uses are defined from here.
if held then
  -- Already held: handed to us (whether or not its announcement reached us), or an identity
  -- acquiring again.  The caller is alive, so it gets its full lease now (a provisional
  -- hand-off is claimed here).
  redis.call('ZREM', queue, token)
  redis.call('HDEL', waiters, token)
  local fence, pttl = sem_claim(permits, meta, registry, member, token, ttl, now_ms)
  sem_expire(permits, meta, retention, now_ms)
  return {1, fence, pttl, 0}
end
local free, granted = false, false  -- nobody queued: all permits are taken
if queued then
  free, granted = sem_hand_off(permits, meta, queue, waiters, registry, member, limit, now_ms, now_us, token)
end
if free then
  if granted then return take(redis.call('HGET', meta, 'fence')) end
  return take(state[2])
end

local wait_ms = sem_next_end(permits, now_ms) or -1
sem_expire(permits, meta, retention, now_ms)
if not enqueue then
  return {0, wait_ms, limit}
end
queue_waiter(queue, waiters, meta, token, ttl, lease, channel, id, info, now_ms)
return {0, wait_ms, limit}
