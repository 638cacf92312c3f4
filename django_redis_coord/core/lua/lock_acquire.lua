-- Acquire a lock, or join (and refresh a place in) its FIFO wait queue.
-- KEYS[1] name (holds the raw token)   KEYS[2] meta hash   KEYS[3] queue zset (token -> arrival)
-- KEYS[4] waiters hash (token -> waiter record, see parse_waiter())   KEYS[5] registry zset
-- ARGV[1] token   ARGV[2] ttl ms (0 = no expiry)   ARGV[3] "0" try only, "1" queue when busy,
--   "2" queue when busy and the caller may already be queued (a retry: clean up its old state);
--   plus 4 when the library made the token for this very acquire: a holder with that token can
--   then only be this call, sent once more by a client that retries after a timeout
-- ARGV[4] waiter lease ms   ARGV[5] holder info (JSON)   ARGV[6] registry member
-- ARGV[7] the channel the caller's process listens on   ARGV[8] "<waiter number>.<attempt>" there
-- ARGV[9] metadata retention ms
-- Returns {1, fence, pttl, provisional} when the caller holds the lock (pttl -1: no expiry),
-- else {0, holder pttl (-1: no expiry, -2: none)} (queued when asked to), and {-2}
-- (nothing written) when the name holds another kind of value than a lock's token.
local name, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mode = tonumber(ARGV[3])
local own = mode >= 4
if own then mode = mode - 4 end
local token, ttl, enqueue, retry, lease = ARGV[1], tonumber(ARGV[2]), mode ~= 0, mode == 2, tonumber(ARGV[4])
local info, member, channel, id, retention = ARGV[5], ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])

-- Fast path: a first attempt on a lock nobody waits for is one SET NX.
if not retry and redis.call('EXISTS', queue) == 0 then
  local granted
  if ttl > 0 then
    granted = redis.call('SET', name, token, 'NX', 'PX', ttl)
  else
    granted = redis.call('SET', name, token, 'NX')
  end
  if granted then
    local now_ms, now_us = server_now()
    local fence = record_grant(meta, registry, member, token, ttl, info, now_ms, now_us, retention, '0')
    local pttl = -1
    if ttl > 0 then pttl = ttl end
    return {1, fence, pttl, 0}
  end
  if not enqueue and not own then
    if redis.call('TYPE', name).ok ~= 'string' then
      return {-2}
    end
    return {0, redis.call('PTTL', name)}
  end
end

-- The slow path: the helpers only it uses are defined from here.
local now_ms, now_us = server_now()
local current = redis.pcall('GET', name)
if type(current) == 'table' then
  return {-2}  -- the name holds another kind of value (a semaphore's permits): nothing written
end
if current == token and (own or (retry and not redis.call('ZSCORE', queue, token))) then
  -- Ours: handed to us (which took us off the queue), whether or not its announcement reached
  -- us, or granted to this very call before (its token is its own).  A caller using the holder's
  -- token that was not handed the lock waits in line like any other.
  local provisional = 0
  if redis.call('HGET', meta, 'claim') == '1' then provisional = 1 end
  return {1, tonumber(redis.call('HGET', meta, 'fence')), redis.call('PTTL', name), provisional}
end
if not current then
  local other = hand_off(name, meta, queue, waiters, registry, member, now_ms, now_us, retention, token)
  if not other then
    -- Granted: not waiting any more, also when this token was queued by another call (a resend, an
    -- explicit token): its place would later be handed the lock it already holds.
    redis.call('ZREM', queue, token)
    redis.call('HDEL', waiters, token)
    local fence = grant_lock(name, meta, registry, member, token, ttl, info, now_ms, now_us, retention, '0')
    local pttl = -1
    if ttl > 0 then pttl = ttl end
    return {1, fence, pttl, 0}
  end
end

if not enqueue then
  return {0, redis.call('PTTL', name)}
end
queue_waiter(queue, waiters, meta, token, ttl, lease, channel, id, info, now_ms)
return {0, redis.call('PTTL', name)}
