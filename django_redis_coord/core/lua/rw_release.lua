-- Release the read or write hold of ARGV[1] and hand the lock on in FIFO order (rw_hand_off()).
-- KEYS[1] holders zset   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] token   ARGV[2] registry member   ARGV[3] metadata retention ms (see sem_expire())
-- Returns 1 when released, 0 when the token holds nothing live (never did, or its lease ended).
local holders, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, member, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now_ms, now_us = server_now()
local score = redis.pcall('ZSCORE', holders, token)
if type(score) == 'table' then
  return 0  -- the name holds another kind of value: nothing of ours to release
end
local released = 0
if score then
  local left = sem_left(score, now_ms)
  if not left or left > 0 then released = 1 end
  redis.call('ZREM', holders, token)
  redis.call('HDEL', meta, 'p:' .. token)
end
if redis.call('EXISTS', queue) == 0 then
  sem_settle(holders, meta, registry, member, score, retention, now_ms)
  return released
end
-- The slow path: the helpers only it uses are defined from here.
local mode = rw_mode(holders, meta, now_ms)
if mode then
  rw_hand_off(holders, meta, queue, waiters, registry, member, mode, now_ms, now_us, nil)
end
sem_settle(holders, meta, registry, member, score, retention, now_ms)
return released
