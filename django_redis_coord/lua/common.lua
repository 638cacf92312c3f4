-- Helpers shared by the lock scripts; this file is prepended to each of them when loaded.
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

-- Record that `token` now holds `name` for `ttl` ms (0 = no expiry): the next fence (next_fence()
-- inlined into the same HSET: this is the hot path), who holds it, and its registry entry.
local function record_grant(meta, registry, member, token, ttl, info, now_ms, now_us, retention)
  local fence = math.max(tonumber(redis.call('HGET', meta, 'fence') or '0') + 1, now_us)
  redis.call('HSET', meta, 'fence', int(fence), 'token', token, 'info', info, 'since', int(now_ms),
             'ttl', int(ttl), 'claim', '0')
  if ttl > 0 then
    redis.call('ZADD', registry, int(now_ms + ttl), member)
    redis.call('PEXPIRE', meta, ttl + retention)
  else
    redis.call('ZADD', registry, '+inf', member)
    redis.call('PERSIST', meta)
  end
  return fence
end

-- Make `token` the holder of `name` (whoever held it before) and record the grant.
local function grant_lock(name, meta, registry, member, token, ttl, info, now_ms, now_us, retention)
  if ttl > 0 then
    redis.call('SET', name, token, 'PX', ttl)
  else
    redis.call('SET', name, token)
  end
  return record_grant(meta, registry, member, token, ttl, info, now_ms, now_us, retention)
end

-- Drop registry entries whose hold ended without a release (crashed holders).
local function prune_registry(registry, now_ms)
  redis.call('ZREMRANGEBYSCORE', registry, '-inf', '(' .. int(now_ms))
end

-- Parse a waiter record "ttl lease_until lease info" (ms, ms, ms, JSON).
local function parse_waiter(data)
  local a = string.find(data, ' ', 1, true)
  local b = string.find(data, ' ', a + 1, true)
  local c = string.find(data, ' ', b + 1, true)
  return tonumber(string.sub(data, 1, a - 1)), tonumber(string.sub(data, a + 1, b - 1)),
         tonumber(string.sub(data, b + 1, c - 1)), string.sub(data, c + 1)
end

-- Grant the lock to the first queued waiter whose lease is still running, dropping the dead
-- ones, and push the grant ("fence provisional") onto its wake list.  A provisional grant must
-- be claimed by the waiter (lock_extend.lua) to get its full TTL.  `except` (may be nil) is a
-- token that must not be granted here (the caller itself).  Returns the granted token or nil.
local function hand_off(name, meta, queue, waiters, registry, member, wake_prefix, wake_suffix,
                        now_ms, now_us, retention, except)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head or head == except then
      return nil
    end
    redis.call('ZREM', queue, head)
    local data = redis.call('HGET', waiters, head)
    redis.call('HDEL', waiters, head)
    local wake = wake_prefix .. head .. wake_suffix
    if data then
      local ttl, lease_until, lease, info = parse_waiter(data)
      if lease_until >= now_ms then
        local provisional = 0
        local grant_ttl = ttl
        if ttl == 0 or ttl > 2 * lease then
          -- A long (or endless) hold goes to a waiter for two leases only, until it claims the
          -- rest: a waiter that died while queued stalls the queue for a bounded time.
          provisional = 1
          grant_ttl = 2 * lease
        end
        local fence = grant_lock(name, meta, registry, member, head, grant_ttl, info, now_ms, now_us, retention)
        if provisional == 1 then redis.call('HSET', meta, 'claim', '1') end
        redis.call('RPUSH', wake, int(fence) .. ' ' .. provisional)
        redis.call('PEXPIRE', wake, math.max(lease_until - now_ms, 1) + 60000)
        return head
      end
    end
    redis.call('DEL', wake)
  end
end

-- Semaphores.  The sorted set at the name maps each permit's token to the end of its lease (ms,
-- server time; +inf: no expiry).  The meta hash keeps the limit ('limit'), the fence counter and
-- one record per permit, field "p:<token>" = "fence since claim info" (claim 1: provisional).
-- Scores go to Redis as Lua numbers (exact below 2^53); strings are built with int().

-- Drop the permits whose lease has ended (with their records); returns how many.
local function sem_reclaim(permits, meta, now_ms)
  local expired = redis.call('ZRANGEBYSCORE', permits, '-inf', now_ms)
  if #expired == 0 then
    return 0
  end
  for _, token in ipairs(expired) do
    redis.call('HDEL', meta, 'p:' .. token)
  end
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now_ms)
  return #expired
end

-- Give `token` a permit for `ttl` ms (0 = no expiry) after the fence `last` (next_fence() inlined
-- into the record's HSET: this is the hot path).  Returns the fence and the lease end.
local function sem_grant(permits, meta, token, ttl, claim, info, now_ms, now_us, last)
  local fence = int(math.max(tonumber(last or '0') + 1, now_us))
  local expiry = '+inf'
  if ttl > 0 then expiry = now_ms + ttl end
  redis.call('ZADD', permits, expiry, token)
  redis.call('HSET', meta, 'fence', fence, 'p:' .. token, fence .. ' ' .. int(now_ms) .. ' ' .. claim .. ' ' .. info)
  return tonumber(fence), expiry
end

-- Parse a permit record: fence, since ms, claim flag (numbers), info.  Same layout as a waiter record.
local sem_record = parse_waiter

-- Put `token` in the FIFO queue (once) and (re)write its waiter record "ttl lease_until lease
-- info"; the queue and the record outlive two leases without a refresh.
local function queue_waiter(queue, waiters, meta, token, ttl, lease, info, now_ms)
  if not redis.call('ZSCORE', queue, token) then
    redis.call('ZADD', queue, redis.call('HINCRBY', meta, 'seq', 1), token)
  end
  redis.call('HSET', waiters, token, int(ttl) .. ' ' .. int(now_ms + lease) .. ' ' .. int(lease) .. ' ' .. info)
  for _, key in ipairs({queue, waiters}) do
    if redis.call('PTTL', key) < 2 * lease then redis.call('PEXPIRE', key, 2 * lease) end
  end
  return redis.call('ZRANK', queue, token)
end

-- Remaining ms of a lease ending at `score` (nil: no expiry).
local function sem_left(score, now_ms)
  if string.find(score, 'inf', 1, true) then return nil end
  return tonumber(score) - now_ms
end

-- Keep the registry entry of the semaphore at its latest lease end: raise it to `expiry` (a new
-- or renewed lease), or recompute it when `expiry` is nil (a permit left).
local function sem_publish(permits, registry, member, expiry)
  if expiry then
    local listed = redis.call('ZSCORE', registry, member)
    local raise = not listed
    if listed and not string.find(listed, 'inf', 1, true) then
      raise = expiry == '+inf' or tonumber(listed) < expiry
    end
    if raise then
      redis.call('ZADD', registry, expiry, member)
    end
    return
  end
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[1] then
    redis.call('ZADD', registry, last[2], member)
  else
    redis.call('ZREM', registry, member)
  end
end

-- Give the permit held by `token` a full lease of `ttl` ms from now (0: no expiry) and clear its
-- provisional mark.  Returns its fence and the lease in ms (-1: no expiry).
local function sem_claim(permits, meta, registry, member, token, ttl, now_ms)
  local field = 'p:' .. token
  local fence, since, _, info = sem_record(redis.call('HGET', meta, field) or '0 0 0 {}')
  local expiry, pttl = '+inf', -1
  if ttl > 0 then expiry, pttl = now_ms + ttl, ttl end
  local before = redis.call('ZSCORE', permits, token)
  redis.call('ZADD', permits, expiry, token)
  redis.call('HSET', meta, field, int(fence) .. ' ' .. int(since) .. ' 0 ' .. info)
  if before and pttl ~= -1 and (not sem_left(before, now_ms) or tonumber(before) > expiry) then
    sem_publish(permits, registry, member, nil)  -- the lease got shorter: recompute
  else
    sem_publish(permits, registry, member, expiry)
  end
  return fence, pttl
end

-- Serve the FIFO queue while permits are free: each live waiter at the head gets a permit pushed
-- onto its wake list ("fence provisional", as for locks); dead ones are dropped.  Stops at
-- `except` (the caller, may be nil).  Returns whether a permit is free with nobody queued ahead
-- of `except`, and whether anyone was granted one here.
local function sem_hand_off(permits, meta, queue, waiters, registry, member, wake_prefix, wake_suffix, limit,
                            now_ms, now_us, except)
  local granted_any = false
  while redis.call('ZCARD', permits) < limit do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head or head == except then
      return true, granted_any
    end
    redis.call('ZREM', queue, head)
    local data = redis.call('HGET', waiters, head)
    redis.call('HDEL', waiters, head)
    local wake = wake_prefix .. head .. wake_suffix
    local granted = false
    if data then
      local ttl, lease_until, lease, info = parse_waiter(data)
      if lease_until >= now_ms then
        local provisional, grant_ttl = 0, ttl
        if ttl == 0 or ttl > 2 * lease then
          provisional, grant_ttl = 1, 2 * lease
        end
        local fence, expiry = sem_grant(permits, meta, head, grant_ttl, provisional, info, now_ms, now_us,
                                        redis.call('HGET', meta, 'fence'))
        sem_publish(permits, registry, member, expiry)
        redis.call('RPUSH', wake, int(fence) .. ' ' .. provisional)
        redis.call('PEXPIRE', wake, math.max(lease_until - now_ms, 1) + 60000)
        granted, granted_any = true, true
      end
    end
    if not granted then
      redis.call('DEL', wake)
    end
  end
  return false, granted_any
end
