-- A protected resource that only listens to the newest lock holder (a fenced read or write).
-- KEYS[1] the value (a string)   KEYS[2] the highest fence seen so far
-- ARGV[1] "read" or "write"   ARGV[2] the caller's fence   ARGV[3] the new value (write)
-- A caller whose fence is below the highest seen is refused: {0, highest}.  Otherwise the fence
-- is remembered (so an older holder is refused from now on, also for reads) and the read returns
-- {1, value} or the write stores ARGV[3] and returns {1, ''}.  Fences are decimal integers below
-- 2^53, compared as numbers.
local highest = redis.call('GET', KEYS[2])
local fence = tonumber(ARGV[2])
if highest and fence < tonumber(highest) then
  return {0, highest}
end
if not highest or fence > tonumber(highest) then
  redis.call('SET', KEYS[2], ARGV[2])
end
if ARGV[1] == 'write' then
  redis.call('SET', KEYS[1], ARGV[3])
  return {1, ''}
end
return {1, redis.call('GET', KEYS[1]) or ''}
