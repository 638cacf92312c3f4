-- Release a lock held with ARGV[1] and hand it to the first live waiter, if any.
-- KEYS[1] name   KEYS[2] meta hash   KEYS[3] queue zset   KEYS[4] waiters hash   KEYS[5] registry
-- ARGV[1] token   ARGV[2] registry member   ARGV[3] metadata retention ms
-- Returns 1 when released, 0 when someone else holds the lock, -1 when nobody does.
local name, meta, queue, waiters, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, member, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local current = redis.call('GET', name)
if not current then
  return -1
end
if current ~= token then
  return 0
end
-- The meta hash stays for the retention period, also after a hold with no expiry, for its fence
-- counter (and the arrival counter of the queue); its holder fields describe nobody once `name`
-- is gone (readers compare their token with the one at `name`) and the next grant overwrites them.
local function let_go()
  redis.call('DEL', name)
  redis.call('ZREM', registry, member)
  registry_removed(registry)
  redis.call('PEXPIRE', meta, retention)
  return 1
end
if redis.call('EXISTS', queue) == 0 then
  return let_go()
end
-- The slow path: the helpers only it uses are defined from here.
-- A hand-off overwrites the name, the holder fields of the meta hash and the registry entry.
local now_ms, now_us = server_now()
if hand_off(name, meta, queue, waiters, registry, member, now_ms, now_us, retention, nil) then
  return 1
end
return let_go()
