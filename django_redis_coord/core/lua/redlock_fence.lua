-- Raise the fence counter of a lock held with ARGV[1] to at least ARGV[2].  A Redlock's fence is
-- the largest fence its masters issued for the grant; each master of the quorum records it, so
-- whichever of them grants the name next issues a larger one.
-- KEYS[1] name   KEYS[2] meta hash
-- ARGV[1] token   ARGV[2] fence
-- Returns 1 when the caller holds the lock (its counter is now at least ARGV[2]), else 0.
local name, meta = KEYS[1], KEYS[2]
local token, floor = ARGV[1], tonumber(ARGV[2])
if redis.call('GET', name) ~= token then
  return 0
end
local last = tonumber(redis.call('HGET', meta, 'fence') or '0')
if floor > last then
  redis.call('HSET', meta, 'fence', int(floor))
end
return 1
