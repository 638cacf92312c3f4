-- Leave the wait queue (a blocking acquire gave up).  If the lock was handed to the caller in
-- the meantime (or granted by an attempt whose reply was lost) it keeps it; if the caller was at
-- the head of a free lock, the next waiter gets it.
-- KEYS and ARGV as for lock_acquire.lua; ARGV[3] "3" gives up and gives back: an interrupted
-- acquire leaves the queue and releases the lock if it holds it (a grant whose reply it never
-- read), in this one call, safe to run again.
-- Returns {1, fence, pttl, provisional} when the caller holds the lock, else {0, holder pttl
-- (-1: no expiry, -2: none)}, as lock_acquire.lua does.
local name, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, member, retention = ARGV[1], ARGV[6], tonumber(ARGV[9])
local give_back = ARGV[3] == '3'
local now_ms, now_us = server_now()

-- Still queued: whoever holds the lock with this token was not handed it as this caller.
local queued = redis.call('ZREM', queue, token) == 1
redis.call('HDEL', waiters, token)
if not queued and redis.call('GET', name) == token then
  if give_back then
    -- Released as lock_release.lua does; the next waiter, if any, gets it below.
    redis.call('DEL', name)
    redis.call('ZREM', registry, member)
    registry_removed(registry)
    redis.call('PEXPIRE', meta, retention)
  else
    local provisional = 0
    if redis.call('HGET', meta, 'claim') == '1' then provisional = 1 end
    return {1, tonumber(redis.call('HGET', meta, 'fence')), redis.call('PTTL', name), provisional}
  end
end
if redis.call('EXISTS', name) == 0 then
  hand_off(name, meta, queue, waiters, registry, member, now_ms, now_us, retention, nil)
end
return {0, redis.call('PTTL', name)}
