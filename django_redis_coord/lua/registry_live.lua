-- The live entries of the holder registries passed as KEYS (on a standalone server: all 16384).
-- A registry is a sorted set: member "<kind>:<name>", score = expiry in server ms or +inf.
-- Returns {server now ms, member, expiry, member, expiry, ...} for the entries not yet expired
-- (expiry "inf" for holds without expiry).  One ZUNION per chunk of keys; servers older than
-- Redis 6.2 (no ZUNION) fall back to one ZRANGEBYSCORE per key.
local now_ms = server_now()
local out = {int(now_ms)}
local chunk = 4000

local function keep(member, score)
  if score == 'inf' or tonumber(score) > now_ms then
    out[#out + 1] = member
    out[#out + 1] = score
  end
end

local function union(first, last)
  local args = {'ZUNION', last - first + 1}
  for i = first, last do
    args[#args + 1] = KEYS[i]
  end
  args[#args + 1] = 'WITHSCORES'
  return redis.pcall(unpack(args))
end

local first = 1
while first <= #KEYS do
  local last = math.min(first + chunk - 1, #KEYS)
  local reply = union(first, last)
  if reply.err then
    for i = first, last do
      local entries = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. int(now_ms), '+inf', 'WITHSCORES')
      for j = 1, #entries, 2 do
        keep(entries[j], entries[j + 1])
      end
    end
  else
    for j = 1, #reply, 2 do
      keep(reply[j], reply[j + 1])
    end
  end
  first = last + 1
end
return out
