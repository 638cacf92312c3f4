-- A fenced read of a value written with django_redis_coord.fencing.fenced_set (same hash layout).
-- KEYS[1] the hash: 'value' and 'fence' (the highest fence seen)   ARGV[1] the reader's fence
-- A reader whose fence is below the highest seen is refused: {0, highest}.  Otherwise its fence
-- is recorded - from now on fenced_set refuses every older holder, so a stale holder cannot slip
-- a write in between this read and the reader's own write - and the value is returned: {1, value}.
local highest = redis.call('HGET', KEYS[1], 'fence')
if highest and tonumber(ARGV[1]) < tonumber(highest) then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'value') or ''}
