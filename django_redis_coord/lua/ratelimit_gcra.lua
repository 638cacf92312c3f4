-- One decision of a GCRA rate limit (generic cell rate algorithm), on the server's clock.
-- KEYS[1] the limit's key: its theoretical arrival time (TAT), µs since the epoch
-- ARGV[1] emission interval µs   ARGV[2] tolerance µs (burst x interval)   ARGV[3] cost
-- ARGV[4] longest wait µs: a call whose slot opens within it reserves the slot (0: decide now)
-- ARGV[5] 1 to peek (decide, write nothing)
-- Returns {allowed, remaining, retry_after µs, reset_after µs, now µs, wait µs, TAT written}.
local key = KEYS[1]
local interval, tolerance, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local max_wait, peek = tonumber(ARGV[4]), ARGV[5] == '1'
local _, now = server_now()
local tat = math.max(tonumber(redis.call('GET', key) or 0), now)
local new_tat = tat + cost * interval
-- How long until this call's slot opens (<= 0: open now).
local wait = new_tat - tolerance - now
if wait > 0 and (peek or wait > max_wait) then
  return {0, math.max(math.floor((tolerance - (tat - now)) / interval), 0), wait, tat - now, now, 0, 0}
end
if peek then
  return {1, math.floor((tolerance - (tat - now)) / interval), 0, tat - now, now, 0, 0}
end
-- The key lives until the limit is full again.
redis.call('SET', key, int(new_tat), 'PX', math.ceil((new_tat - now) / 1000))
wait = math.max(wait, 0)
return {1, math.max(math.floor((tolerance - (new_tat - now)) / interval), 0), 0, new_tat - now, now, wait, new_tat}
