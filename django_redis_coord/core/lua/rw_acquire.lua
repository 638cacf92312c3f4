-- Take a read or a write hold of a read-write lock, or join (and refresh a place in) its FIFO queue.
-- KEYS[1] holders zset at the name (token -> lease end ms)   KEYS[2] meta hash   KEYS[3] queue zset
-- KEYS[4] waiters hash (token -> waiter record, see parse_waiter())   KEYS[5] registry
-- ARGV[1] token, whose first letter is the mode: 'r' read, 'w' write   ARGV[2] lease ms (0 = no
--   expiry)   ARGV[3] "0" try only, "1" queue when busy, "2" queue when busy and the caller may
--   already be queued (a refresh); plus 4 when the library made the token for this very call
-- ARGV[4] waiter lease ms   ARGV[5] holder info (JSON)   ARGV[6] registry member
-- ARGV[7] the channel the caller's process listens on   ARGV[8] "<waiter number>.<attempt>" there
-- ARGV[9] metadata retention ms (see sem_expire())
-- A read is granted when no writer holds and nobody live is queued ahead of it; a write when
-- nobody holds and nobody live is queued ahead of it (FIFO across modes: a reader arriving behind
-- a queued writer waits for it).
-- Returns {1, fence, pttl, 0} when the caller holds (pttl -1: no expiry), {0, ms until the
-- earliest lease ends (-1: none ends)} when it does not (queued when asked to), and {-2} (nothing
-- written) when the name holds another kind of value.
local holders, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl, enqueue, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]) % 4 ~= 0, tonumber(ARGV[4])
local info, member, channel, id, retention = ARGV[5], ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local want = string.sub(token, 1, 1)
if want ~= 'r' and want ~= 'w' then
  return redis.error_reply('ERR a read-write lock token starts with r or w')
end

local now_ms, now_us = server_now()
local mode = rw_mode(holders, meta, now_ms)
if not mode then
  return {-2}
end
local held = redis.call('ZSCORE', holders, token)
local queued = redis.call('EXISTS', queue) == 1  -- the queue and the waiter records expire together
-- Grant the caller its hold; it waits no more (a refresh of a queued caller, or a resent first call).
local function take()
  if queued then
    redis.call('ZREM', queue, token)
    redis.call('HDEL', waiters, token)
  end
  local fence, expiry = sem_grant(holders, meta, token, ttl, 0, info, now_ms, now_us, redis.call('HGET', meta, 'fence'))
  sem_publish(holders, registry, member, expiry, now_ms)
  sem_expire(holders, meta, retention, now_ms)
  if ttl > 0 then return {1, fence, ttl, 0} end
  return {1, fence, -1, 0}
end
if not held and not queued and (mode == '' or (mode == 'r' and want == 'r')) then
  return take()  -- nobody waits and the lock is free, or held by readers and this is a read
end
-- The slow path: the helpers only it uses are defined from here.
if held then
  return rw_held(holders, meta, queue, waiters, registry, member, token, ttl, retention, now_ms)
end
local after, clear = mode, true
if queued then
  after, clear = rw_hand_off(holders, meta, queue, waiters, registry, member, mode, now_ms, now_us, token)
end
if clear and (after == '' or (after == 'r' and want == 'r')) then
  return take()
end

local wait_ms = sem_next_end(holders, now_ms) or -1
sem_expire(holders, meta, retention, now_ms)
if enqueue then
  queue_waiter(queue, waiters, meta, token, ttl, lease, channel, id, info, now_ms)
end
return {0, wait_ms}
