-- Store a cache value for the producer that holds the write side of the key's fill lock (a
-- read-write lock, lua/lib/rwlock.lua); refuse a producer whose hold has ended (its lease ran out
-- while it was paused, or the lock moved on to later holders).
-- KEYS[1] the cache key (a plain string: what the cache's get() reads)   KEYS[2] the fill lock's
-- holders (sorted set at its name: token -> lease end ms, +inf: no expiry)   KEYS[3] the fill
-- lock's meta hash (its fence counter)
-- ARGV[1] the producer's write token   ARGV[2] the encoded value   ARGV[3] expiry in ms (0: none)
-- Returns {1} when stored; {0, the value the key holds (or false), the lock's latest fence (or
-- false)} when refused.  The hold is checked and the value written in this one script: nothing
-- can come between them.
local now_ms = server_now()
local lease = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
local live = type(lease) == 'string' and (string.find(lease, 'inf', 1, true) or tonumber(lease) > now_ms)
if not live then
  return {0, redis.call('GET', KEYS[1]), redis.call('HGET', KEYS[3], 'fence')}
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return {1}
