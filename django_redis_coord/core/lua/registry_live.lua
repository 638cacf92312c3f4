-- The live entries of the holder registries passed as KEYS, for servers without ZUNION (Redis
-- older than 6.2; newer servers are read with one ZUNION instead).  A registry is a sorted set:
-- member "<kind>:<name>", score = expiry in server ms or +inf.
-- Returns {server now ms, member, expiry, member, expiry, ...} for the entries not yet expired.
local now_ms = server_now()
local out = {int(now_ms)}
local count = 1
for i = 1, #KEYS do
  local entries = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. int(now_ms), '+inf', 'WITHSCORES')
  for j = 1, #entries do
    count = count + 1
    out[count] = entries[j]
  end
end
return out
