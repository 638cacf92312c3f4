-- Change the expiry of a lock held with ARGV[1].
-- KEYS[1] name   KEYS[2] meta hash   KEYS[3] registry
-- ARGV[1] token   ARGV[2] milliseconds   ARGV[3] "add" (to the remaining time), "replace",
-- "persist" (no expiry) or "claim" (of a provisional hand-off: "replace", or "persist" when ARGV[2]
-- is 0; nothing changes once the hold was claimed or extended)   ARGV[4] registry member
-- ARGV[5] metadata retention ms
-- Returns the new remaining time in ms (-1: no expiry), -2 when the caller does not hold the
-- lock, -3 when asked to add time to a lock that has no expiry.
local name, meta, registry = KEYS[1], KEYS[2], KEYS[3]
local token, ms, mode, member, retention = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
if redis.call('GET', name) ~= token then
  return -2
end
if mode == 'claim' then
  if redis.call('HGET', meta, 'claim') ~= '1' then
    return redis.call('PTTL', name)  -- claimed, or extended or reset by its holder meanwhile: kept
  end
  if ms > 0 then mode = 'replace' else mode = 'persist' end
end
-- A renewal's first write needs no memory (PERSIST, PEXPIRE): under `maxmemory` with `noeviction`
-- Redis refuses the first write of a script that may need memory (SET, HSET, ZADD, ...), never the
-- writes after one that ran, so a full Redis still renews.  Holds of this slot that ended without a
-- release are dropped from the registry when its expiry is pushed back (registry_added()).
local now_ms = server_now()
if mode == 'persist' then
  redis.call('PERSIST', name)
  redis.call('PERSIST', meta)
  redis.call('HSET', meta, 'claim', '0')
  redis.call('ZADD', registry, '+inf', member)
  registry_added(registry, 0, now_ms)
  return -1
end
local new_ttl = ms
if mode == 'add' then
  local pttl = redis.call('PTTL', name)
  if pttl < 0 then
    return -3
  end
  new_ttl = pttl + ms
end
redis.call('PEXPIRE', name, new_ttl)
redis.call('PEXPIRE', meta, new_ttl + retention)
redis.call('HSET', meta, 'claim', '0')
redis.call('ZADD', registry, int(now_ms + new_ttl), member)
registry_added(registry, new_ttl, now_ms)
return new_ttl
