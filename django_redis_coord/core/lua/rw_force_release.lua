-- Take back one hold of a read-write lock, a read or the write, whoever holds it (an operator's
-- action), fence its holder out and serve the FIFO queue as a release does (rw_hand_off()): the
-- waiters that hold kept waiting are let in at once.  The hold is named by its fence: an operator
-- confirms a particular grant, and never sees the holder's token.
-- KEYS[1] holders zset   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] registry member   ARGV[2] the hold's fence   ARGV[3] metadata retention ms (see sem_expire())
-- Returns {status, released hold's fence, fence counter after the bump, whether a waiter was granted a hold}:
-- status 1 released, 0 no live hold has that fence (nothing written when the name holds another kind of value).
local holders, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, expected, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms, now_us = server_now()
local last = redis.call('HGET', meta, 'fence') or '0'
-- Drops the holds whose lease ended (as a release does); false: the name is another primitive's.
if not rw_mode(holders, meta, now_ms) then
  return {0, ARGV[2], last, false}
end
local victim = sem_token_of_fence(meta, redis.call('ZRANGE', holders, 0, -1), expected)
if not victim then
  return {0, ARGV[2], last, false}
end
local score = redis.call('ZSCORE', holders, victim)
redis.call('ZREM', holders, victim)
redis.call('HDEL', meta, 'p:' .. victim)
redis.call('HSET', meta, 'forced_at', int(now_ms), 'forced_fence', ARGV[2])
-- Move the counter past the released hold: every later grant is above it.
local bumped = next_fence(meta, now_us)
local before = redis.call('ZCARD', holders)
if redis.call('EXISTS', queue) == 1 then
  rw_hand_off(holders, meta, queue, waiters, registry, member, rw_mode(holders, meta, now_ms), now_ms, now_us, nil)
end
-- Whether a waiter was granted a hold (dead waiters dropped from the queue on the way do not count).
local heir = redis.call('ZCARD', holders) > before
sem_unlisted(holders, registry, member, score, now_ms)
sem_expire(holders, meta, retention, now_ms)
return {1, ARGV[2], int(bumped), heir}
