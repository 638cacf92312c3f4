-- Change the lease of the permit held with ARGV[1] (also claims a provisional hand-off).
-- KEYS[1] permits zset   KEYS[2] meta hash   KEYS[3] registry
-- ARGV[1] token   ARGV[2] milliseconds   ARGV[3] "add" (to the remaining time), "replace",
-- "persist" (no expiry) or "claim" (of a provisional hand-off: "replace", or "persist" when ARGV[2]
-- is 0; nothing changes once the permit was claimed or extended)   ARGV[4] registry member
-- ARGV[5] metadata retention ms (see sem_expire())
-- Returns the new remaining time in ms (-1: no expiry), -2 when the token holds no live permit,
-- -3 when asked to add time to a permit that has no expiry.
local permits, meta, registry = KEYS[1], KEYS[2], KEYS[3]
local token, ms, mode, member, retention = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local now_ms = server_now()
local score = redis.call('ZSCORE', permits, token)
if not score then
  return -2
end
local left = sem_left(score, now_ms)
if left and left <= 0 then
  -- The lease ended: the permit is gone even though nobody reclaimed it yet.
  sem_reclaim(permits, meta, now_ms)
  sem_publish(permits, registry, member, nil, now_ms)
  sem_expire(permits, meta, retention, now_ms)
  return -2
end
if mode == 'claim' then
  local _, _, provisional = sem_record(redis.call('HGET', meta, 'p:' .. token) or '0 0 0 {}')
  if provisional ~= 1 then
    return left or -1  -- claimed, or extended or reset by its holder meanwhile: kept
  end
  if ms > 0 then mode = 'replace' else mode = 'persist' end
end
local new_ttl = ms
if mode == 'persist' then
  new_ttl = 0
elseif mode == 'add' then
  if not left then
    return -3
  end
  new_ttl = left + ms
end
-- A renewal's first write needs no memory (see lock_extend.lua): PERSIST, whose expiry
-- sem_expire() sets again before the script ends (the permits set holds this permit).
redis.call('PERSIST', permits)
local _, pttl = sem_claim(permits, meta, registry, member, token, new_ttl, now_ms)
sem_expire(permits, meta, retention, now_ms)
return pttl
