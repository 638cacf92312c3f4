-- One decision of a GCRA rate limit (generic cell rate algorithm), on the server's clock.
-- KEYS[1] the limit's key: its theoretical arrival time (TAT), µs since the epoch
-- ARGV[1] emission interval µs   ARGV[2] tolerance µs (burst x interval)   ARGV[3] cost
-- ARGV[4] longest wait µs: a call whose slot opens within it is admitted, reserving the slot (0: open
--         now; -1: peek, write nothing)
-- Returns "<seconds> <microseconds> <TAT read, 0: none>", the server's TIME and the TAT as they
-- came: the caller derives the reply from them with the same arithmetic.  (One string costs the
-- server and the client less than an array of numbers, and a refused call, the hot case, is
-- nothing more than this reply.)
local key = KEYS[1]
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local stored = redis.call('GET', key) or '0'
local new_tat = math.max(tonumber(stored), now) + ARGV[3] * ARGV[1]
-- Admitted when its slot (new TAT - tolerance) opens within the longest wait; the key lives
-- until the limit is full again.
local longest = tonumber(ARGV[4])
if longest >= 0 and new_tat - ARGV[2] - now <= longest then
  redis.call('SET', key, string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
end
return t[1] .. ' ' .. t[2] .. ' ' .. stored
