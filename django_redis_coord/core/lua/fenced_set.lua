-- Store a value on behalf of a lock holder, refusing holders older than the last writer.
-- KEYS[1] a hash: 'value' (the protected value) and 'fence' (the highest fence that wrote it)
-- ARGV[1] the writer's fence (a decimal integer below 2^53)   ARGV[2] the value
-- ARGV[3] expiry of the hash in ms (0: none; the fence is forgotten with the value)
-- Returns {1, fence} when written (a fence equal to the last one is the same holder writing
-- again), {0, highest fence} when refused: a newer holder has written since.
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and tonumber(ARGV[1]) < tonumber(stored) then
  return {0, stored}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('PERSIST', KEYS[1])
end
return {1, ARGV[1]}
