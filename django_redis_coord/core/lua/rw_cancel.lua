-- Leave the wait queue (a blocking acquire gave up).  A hold handed to the caller meanwhile is
-- kept (with its full lease); waiters the caller kept waiting (readers behind a writer that gives
-- up) are served at once.
-- KEYS and ARGV as for rw_acquire.lua; ARGV[3] "3" gives up and gives back: an interrupted
-- acquire leaves the queue and releases the hold its token has (a grant whose reply it never
-- read), in this one call, safe to run again.
-- Returns {1, fence, pttl, 0} when the caller holds, else {0, ms until the earliest lease ends
-- (-1: none ends)}, as rw_acquire.lua does; {-2} when the name holds another kind of value.
local holders, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl, member, retention = ARGV[1], tonumber(ARGV[2]), ARGV[6], tonumber(ARGV[9])
local give_back = ARGV[3] == '3'
local now_ms, now_us = server_now()
redis.call('ZREM', queue, token)
redis.call('HDEL', waiters, token)
local mode = rw_mode(holders, meta, now_ms)
if not mode then
  return {-2}
end
local score = redis.call('ZSCORE', holders, token)
if score then
  if not give_back then
    return rw_held(holders, meta, queue, waiters, registry, member, token, ttl, retention, now_ms)
  end
  redis.call('ZREM', holders, token)  -- released as rw_release.lua does
  redis.call('HDEL', meta, 'p:' .. token)
  mode = rw_mode(holders, meta, now_ms)
end
rw_hand_off(holders, meta, queue, waiters, registry, member, mode, now_ms, now_us, nil)
local wait_ms = sem_next_end(holders, now_ms) or -1
sem_settle(holders, meta, registry, member, score, retention, now_ms)
return {0, wait_ms}
