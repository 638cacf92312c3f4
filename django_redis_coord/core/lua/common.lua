-- Helpers shared by the lock and semaphore scripts; this file is prepended to each of them when loaded.
-- All times come from the server's TIME: now_ms for deadlines, now_us as the fence floor.

local function server_now()
  local t = redis.call('TIME')
  local sec, usec = tonumber(t[1]), tonumber(t[2])
  return sec * 1000 + math.floor(usec / 1000), sec * 1000000 + usec
end

local function int(n)
  return string.format('%.0f', n)
end

-- The next fence for this name: above every fence issued before (the stored counter) and above
-- the server clock in microseconds, so it keeps growing after a restart that lost the counter.
local function next_fence(meta, now_us)
  local last = tonumber(redis.call('HGET', meta, 'fence') or '0')
  local fence = math.max(last + 1, now_us)
  redis.call('HSET', meta, 'fence', int(fence))
  return fence
end

-- Drop registry entries whose hold ended without a release (crashed holders).
local function prune_registry(registry, now_ms)
  redis.call('ZREMRANGEBYSCORE', registry, '-inf', '(' .. int(now_ms))
end

-- A slot's registry lives as long as its latest entry, and one to two minutes more (for ever while
-- an entry has no expiry).  registry_expire() sets that from the entries; the scripts that add or
-- remove an entry call registry_added() or registry_removed(), which mostly need one PTTL.  The
-- entries of holds that ended without a release are dropped whenever the expiry is set, not on
-- every grant: at least once a minute while grants come, and with the key when they stop (the
-- listing leaves out expired entries by their score).
local function registry_expire(registry, now_ms)
  prune_registry(registry, now_ms)
  local last = redis.call('ZRANGE', registry, -1, -1, 'WITHSCORES')
  if not last[1] then
    return
  end
  if string.find(last[2], 'inf', 1, true) then
    redis.call('PERSIST', registry)
  else
    redis.call('PEXPIRE', registry, math.max(tonumber(last[2]) - now_ms, 0) + 120000)
  end
end

-- An entry that ends in `ttl` ms (0: never) was added to the registry.  `before`: the registry's
-- PTTL taken before the entry was added (nil: not taken), -2 when the key was new: then the entry
-- is its only one (the common case of a slot with one primitive, whose release removed the key).
local function registry_added(registry, ttl, now_ms, before)
  if before == -2 then
    if ttl > 0 then redis.call('PEXPIRE', registry, ttl + 120000) end
    return
  end
  local pttl = before or redis.call('PTTL', registry)
  if ttl == 0 then
    if pttl ~= -1 then
      prune_registry(registry, now_ms)
      redis.call('PERSIST', registry)
    end
  elseif pttl == -1 then  -- a new key, or one kept for an entry with no expiry
    registry_expire(registry, now_ms)
  elseif pttl < ttl + 60000 then
    prune_registry(registry, now_ms)
    redis.call('PEXPIRE', registry, ttl + 120000)
  end
end

-- An entry left the registry: only a registry kept for ever may have lost its last such entry.
local function registry_removed(registry)
  if redis.call('PTTL', registry) == -1 then
    registry_expire(registry, (server_now()))
  end
end

-- Record that `token` now holds `name` for `ttl` ms (0 = no expiry): the next fence (next_fence()
-- inlined into the same HSET: this is the hot path), who holds it, whether the hold is
-- provisional (`claim` '1'), and its registry entry.  The holder fields (token, info, since,
-- claim) are overwritten by each grant and never deleted: they describe the holder only while
-- `name` holds the same token, which every reader checks.  Numbers go to Redis as Lua numbers (exact
-- below 2^53).
local function record_grant(meta, registry, member, token, ttl, info, now_ms, now_us, retention, claim)
  local fence = math.max(tonumber(redis.call('HGET', meta, 'fence') or '0') + 1, now_us)
  redis.call('HSET', meta, 'fence', fence, 'token', token, 'info', info, 'since', now_ms, 'claim', claim)
  local before = redis.call('PTTL', registry)
  if ttl > 0 then
    redis.call('ZADD', registry, now_ms + ttl, member)
    redis.call('PEXPIRE', meta, ttl + retention)
  else
    redis.call('ZADD', registry, '+inf', member)
    redis.call('PERSIST', meta)
  end
  registry_added(registry, ttl, now_ms, before)
  return fence
end

-- Make `token` the holder of `name` (whoever held it before: SET overwrites) and record the grant.
local function grant_lock(name, meta, registry, member, token, ttl, info, now_ms, now_us, retention, claim)
  if ttl > 0 then
    redis.call('SET', name, token, 'PX', ttl)
  else
    redis.call('SET', name, token)
  end
  return record_grant(meta, registry, member, token, ttl, info, now_ms, now_us, retention, claim)
end

-- Parse a waiter record "ttl lease_until lease channel id info" (ms, ms, ms, the channel its
-- process listens on, "<waiter number>.<attempt>" there, JSON).
local function parse_waiter(data)
  local a = string.find(data, ' ', 1, true)
  local b = string.find(data, ' ', a + 1, true)
  local c = string.find(data, ' ', b + 1, true)
  local d = string.find(data, ' ', c + 1, true)
  local e = string.find(data, ' ', d + 1, true)
  return tonumber(string.sub(data, 1, a - 1)), tonumber(string.sub(data, a + 1, b - 1)),
         tonumber(string.sub(data, b + 1, c - 1)), string.sub(data, c + 1, d - 1), string.sub(data, d + 1, e - 1),
         string.sub(data, e + 1)
end

-- Put `token` in the FIFO queue (once: ZADD NX keeps its place; the arrival counter may skip
-- numbers) and (re)write its waiter record (see parse_waiter()): `channel` and `id` say where a
-- grant is announced; the queue and the records, always written together, outlive two leases
-- without a refresh.
local function queue_waiter(queue, waiters, meta, token, ttl, lease, channel, id, info, now_ms)
  redis.call('ZADD', queue, 'NX', redis.call('HINCRBY', meta, 'seq', 1), token)
  redis.call('HSET', waiters, token,
             int(ttl) .. ' ' .. int(now_ms + lease) .. ' ' .. int(lease) .. ' ' .. channel .. ' ' .. id .. ' ' .. info)
  if redis.call('PTTL', queue) < 2 * lease then
    redis.call('PEXPIRE', queue, 2 * lease)
    redis.call('PEXPIRE', waiters, 2 * lease)
  end
end

-- Tell waiter `id` of the process listening on `channel` (see django_redis_coord/waiting.py):
-- "<id> <fence> <provisional>" for a grant, "<id> expires <ms>" for a note.  Only a wake-up: what
-- it announces is already written, and a waiter that misses it finds it at its next refresh.
local function notify(channel, id, message)
  redis.call('PUBLISH', channel, id .. ' ' .. message)
end

-- Take the first queued waiter whose lease is still running off the queue, dropping the dead ones
-- before it.  The caller grants it and announces the grant (notify()).  Stops at `except` (may be
-- nil: the caller itself), leaving it queued, and at a live waiter whose token starts with the
-- letter `blocked` (may be nil: a read-write lock's writers while readers hold, see
-- lib/rwlock.lua), leaving it first in line.  Returns its token, its channel and id, what to
-- grant it (ms) and whether that is provisional (0 or 1), its holder info, the end of its lease and
-- the lease; nil when nobody is left.  A long (or endless) hold goes to a waiter for two leases
-- only, until it claims the rest: a waiter that died while queued stalls the queue for a bounded time.
local function next_waiter(queue, waiters, now_ms, except, blocked)
  while true do
    local head
    local look = except or blocked
    if look then  -- look before taking: the queue must not lose its expiry with its last entry
      head = redis.call('ZRANGE', queue, 0, 0)[1]
      if not head or head == except then
        return nil
      end
    else
      head = redis.call('ZPOPMIN', queue)[1]
      if not head then
        return nil
      end
    end
    local data = redis.call('HGET', waiters, head)
    local ttl, lease_until, lease, channel, id, info
    if data then
      ttl, lease_until, lease, channel, id, info = parse_waiter(data)
      if lease_until < now_ms then
        data = nil
      elseif blocked and string.sub(head, 1, 1) == blocked then
        return nil
      end
    end
    if look then
      redis.call('ZREM', queue, head)
    end
    redis.call('HDEL', waiters, head)
    if data then
      if ttl == 0 or ttl > 2 * lease then
        return head, channel, id, 2 * lease, 1, info, lease_until, lease
      end
      return head, channel, id, ttl, 0, info, lease_until, lease
    end
  end
end

-- Called after a hand-off for `ttl` ms.  The next waiter in line was told the previous holder's
-- expiry and learns the new one only at its next refresh (a third of its own waiter lease), which
-- may come after `ttl`: then tell it ("expires <ms>"), so that a new holder that dies at once is replaced
-- when its TTL ends.  Not `except` (may be nil): the caller, which gets the expiry in its reply.
local function warn_next(queue, waiters, ttl, now_ms, except)
  local after = redis.call('ZRANGE', queue, 0, 0)[1]
  if not after or after == except then
    return
  end
  local data = redis.call('HGET', waiters, after)
  if not data then
    return
  end
  local _, lease_until, lease, channel, id = parse_waiter(data)
  if 3 * ttl >= lease or lease_until < now_ms then
    return
  end
  notify(channel, id, 'expires ' .. int(ttl))
end

-- Grant the lock to the first live queued waiter (next_waiter()) and wake it.  A provisional
-- grant must be claimed by the waiter (lock_extend.lua) to get its full TTL.  `except` (may be
-- nil) is a token that must not be granted here (the caller itself).  Returns the granted token or nil.
local function hand_off(name, meta, queue, waiters, registry, member, now_ms, now_us, retention, except)
  local head, channel, id, ttl, provisional, info = next_waiter(queue, waiters, now_ms, except)
  if not head then
    return nil
  end
  local fence = grant_lock(name, meta, registry, member, head, ttl, info, now_ms, now_us, retention,
                           tostring(provisional))
  notify(channel, id, int(fence) .. ' ' .. provisional)
  if ttl > 0 then  -- whether the next waiter needs the note depends on its own lease (warn_next())
    warn_next(queue, waiters, ttl, now_ms, except)
  end
  return head
end
