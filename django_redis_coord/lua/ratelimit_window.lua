-- One decision of an exact sliding-window limit, on the server's clock.
-- KEYS[1] the limit's sorted set: one member per admitted cost unit, scored by its admission µs
-- ARGV[1] limit (cost units per window)   ARGV[2] window µs   ARGV[3] cost   ARGV[4] 1 to peek
-- Returns {allowed, remaining, retry_after µs, reset_after µs, now µs}.
-- The window of a decision at `now` is (now - window, now]: a unit admitted at s counts until s + window.
local key = KEYS[1]
local limit, window, cost, peek = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count + cost <= limit and not peek then
  -- Members `now:n` with n above every count seen at this `now` (a trim at one `now` is the same
  -- each time): unique without a counter.  ZADD in chunks (Lua's unpack has a stack limit).
  local stamp = string.format('%.0f', now)
  for first = 1, cost, 1000 do
    local members = {}
    for i = first, math.min(first + 999, cost) do
      members[#members + 1] = stamp
      members[#members + 1] = stamp .. ':' .. (count + i)
    end
    redis.call('ZADD', key, unpack(members))
  end
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  return {1, limit - count - cost, 0, window, now}
end
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local reset_after = newest[2] and (tonumber(newest[2]) + window - now) or 0
if count + cost <= limit then
  return {1, limit - count, 0, reset_after, now}
end
-- Admitted once the oldest units leave the window, enough for `cost` to fit.
local rank = count + cost - limit - 1
local leaving = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
return {0, limit - count, tonumber(leaving[2]) + window - now, reset_after, now}
