-- One decision of a GCRA rate limit (generic cell rate algorithm), on the server's clock.
-- KEYS[1] the limit's key: its theoretical arrival time (TAT), µs since the epoch
-- ARGV[1] emission interval µs   ARGV[2] tolerance µs (burst x interval)   ARGV[3] cost
-- ARGV[4] longest wait µs: a call whose slot opens within it is admitted, reserving the slot (0: open now)
-- ARGV[5] 1 to peek (decide, write nothing)
-- Returns {now µs, the TAT read (0: none)}: the caller derives the reply from them with the same
-- arithmetic (the script's reply is what a refused call, the hot case, costs the server).
local key = KEYS[1]
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local stored = tonumber(redis.call('GET', key)) or 0
local new_tat = math.max(stored, now) + ARGV[3] * ARGV[1]
-- Admitted when its slot (new TAT - tolerance) opens within the longest wait; the key lives
-- until the limit is full again.
if ARGV[5] ~= '1' and new_tat - ARGV[2] - now <= tonumber(ARGV[4]) then
  redis.call('SET', key, string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
end
return {now, stored}
