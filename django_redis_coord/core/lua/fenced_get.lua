-- Read a value stored by fenced_set.lua on behalf of the holder of fence ARGV[1].
-- KEYS[1] the hash: 'value' and 'fence' (the highest fence seen)   ARGV[1] the reader's fence
-- ARGV[2] ms a fence record made by this read (nothing was stored) is kept, unless written
-- A reader older than the highest fence seen is refused: {0, false, highest}.  Otherwise its
-- fence is recorded, so that from now on fenced_set refuses every older holder (a stale write can
-- no longer land between this read and the reader's own write), and {1, value, fence} returned.
local highest = redis.call('HGET', KEYS[1], 'fence')
if highest and tonumber(ARGV[1]) < tonumber(highest) then
  return {0, false, highest}
end
if redis.call('HSET', KEYS[1], 'fence', ARGV[1]) == 1 and not highest then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])  -- made by this read: not kept for ever if never written
end
return {1, redis.call('HGET', KEYS[1], 'value'), ARGV[1]}
