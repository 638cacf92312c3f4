-- Give back a GCRA reservation whose caller stopped waiting: move the TAT back by its cost, only
-- when nothing was admitted or reserved on top of it (the TAT is still the one it wrote).
-- Safe to run twice (a client resending it after a lost reply): once this cancel has given the
-- slot back, another caller may reserve that slot and so write the very TAT this one compares
-- with.  So each cancel carries a token of its own and records its outcome under it; a second
-- run returns that outcome and touches nothing.  The record lives until the TAT it guards has
-- passed, plus a second: by then the limit's key cannot hold that TAT any more (a TAT written
-- later is later than the time it was written at, and a key expires at its TAT).
-- KEYS[1] the limit's key   KEYS[2] this cancel's record (the token is in its name)
-- ARGV[1] the TAT the reservation wrote   ARGV[2] its cost x interval µs
-- Returns 1 when the slot was given back, 0 when it was left unused.
local key, record = KEYS[1], KEYS[2]
local done = redis.call('GET', record)
if done then
  return tonumber(done)
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local written = tonumber(ARGV[1])
local given = 0
if redis.call('GET', key) == ARGV[1] then
  given = 1
  local tat = written - ARGV[2]
  if tat <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
  end
end
redis.call('SET', record, given, 'PX', math.max(math.ceil((written - now) / 1000), 0) + 1000)
return given
