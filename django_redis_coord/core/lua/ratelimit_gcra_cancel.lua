-- Give back a GCRA reservation whose caller stopped waiting: move the TAT back by its cost, only
-- when nothing was admitted or reserved on top of it (the TAT is still the one it wrote).
-- KEYS[1] the limit's key   ARGV[1] the TAT the reservation wrote   ARGV[2] its cost x interval µs
-- Returns 1 when the slot was given back, 0 when it was left unused.
local key = KEYS[1]
if redis.call('GET', key) ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = ARGV[1] - ARGV[2]
if tat <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
end
return 1
