-- One decision of an exact sliding-window limit, on the server's clock.
-- KEYS[1] the limit's sorted set: one member per admitted cost unit, scored by its admission µs
-- ARGV[1] limit (cost units per window)   ARGV[2] window µs   ARGV[3] cost   ARGV[4] 1 to peek
-- The window of a decision at `now` is (now - window, now]: a unit admitted at s counts until s + window.
-- Returns, as one string (as ratelimit_gcra does), the server's TIME as it came and what the
-- caller derives the reply from: "1 <seconds> <microseconds> <count before>" when the call was
-- counted, else "0 <seconds> <microseconds> <count> <newest score> <score of the unit whose
-- leaving lets the call in>" (scores 0 when there is none).
local key = KEYS[1]
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count + cost <= limit and ARGV[4] ~= '1' then
  -- Members `now:n` with n above every count seen at this `now` (a trim at one `now` is the same
  -- each time): unique without a counter.  ZADD in chunks (Lua's unpack has a stack limit).
  local stamp = t[1] .. string.format('%06d', t[2])
  for first = 1, cost, 1000 do
    local members = {}
    for i = first, math.min(first + 999, cost) do
      members[#members + 1] = stamp
      members[#members + 1] = stamp .. ':' .. (count + i)
    end
    redis.call('ZADD', key, unpack(members))
  end
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  return '1 ' .. t[1] .. ' ' .. t[2] .. ' ' .. count
end
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] or '0'
local leaving = '0'
if count + cost > limit then
  local rank = count + cost - limit - 1
  leaving = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
end
return '0 ' .. t[1] .. ' ' .. t[2] .. ' ' .. count .. ' ' .. newest .. ' ' .. leaving
