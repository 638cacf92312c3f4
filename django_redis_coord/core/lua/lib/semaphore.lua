-- Helpers of the semaphore scripts (sem_*.lua); loaded after common.lua, before the script.

-- Semaphores.  The sorted set at the name maps each permit's token to the end of its lease (ms,
-- server time; +inf: no expiry).  The meta hash keeps the limit ('limit'), the fence counter and
-- one record per permit, field "p:<token>" = "fence since claim info" (claim 1: provisional).
-- Scores go to Redis as Lua numbers (exact below 2^53); strings are built with int().

-- Drop the permits whose lease has ended (with their records); returns how many, or false (and
-- writes nothing) when the name holds another kind of value than a semaphore's sorted set.
local function sem_reclaim(permits, meta, now_ms)
  local expired = redis.pcall('ZRANGEBYSCORE', permits, '-inf', now_ms)
  if expired.err then
    return false
  end
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

-- Whether the name holds another kind of value than a semaphore's sorted set (a lock's token, a
-- cache entry).  TYPE is one more call: scripts ask only before they first write to a semaphore.
local function sem_foreign(permits)
  local kind = redis.call('TYPE', permits).ok
  return kind ~= 'zset' and kind ~= 'none'
end

-- Parse a permit record "fence since claim info": fence, since ms, claim flag (numbers), info.
local function sem_record(data)
  local a = string.find(data, ' ', 1, true)
  local b = string.find(data, ' ', a + 1, true)
  local c = string.find(data, ' ', b + 1, true)
  return tonumber(string.sub(data, 1, a - 1)), tonumber(string.sub(data, a + 1, b - 1)),
         tonumber(string.sub(data, b + 1, c - 1)), string.sub(data, c + 1)
end

-- The token among `tokens` (members of a permits zset) whose record carries the fence `fence`
-- (a number); nil when none does.  An operator names a hold by its fence, never by its token.
local function sem_token_of_fence(meta, tokens, fence)
  for _, token in ipairs(tokens) do
    if sem_record(redis.call('HGET', meta, 'p:' .. token) or '0 0 0 {}') == fence then
      return token
    end
  end
  return nil
end

-- Remaining ms of a lease ending at `score` (nil: no expiry).
local function sem_left(score, now_ms)
  if string.find(score, 'inf', 1, true) then return nil end
  return tonumber(score) - now_ms
end

-- Remaining ms of the earliest lease (nil: no permit, or none ends).
local function sem_next_end(permits, now_ms)
  local earliest = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
  return earliest[1] and sem_left(earliest[2], now_ms)
end

-- Keep the registry entry of the semaphore at its latest lease end: raise it to `expiry` (a new
-- or renewed lease), or recompute it when `expiry` is nil (a permit left).
local function sem_publish(permits, registry, member, expiry, now_ms)
  if expiry then
    -- GT: added when missing, raised when later (Redis 6.2+); CH: 1 when either happened.
    local before = redis.call('PTTL', registry)
    if redis.call('ZADD', registry, 'GT', 'CH', expiry, member) == 1 then
      if expiry == '+inf' then
        registry_added(registry, 0, now_ms, before)
      else
        registry_added(registry, expiry - now_ms, now_ms, before)
      end
    end
    return
  end
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[1] then
    redis.call('ZADD', registry, last[2], member)  -- no later than before: the key's expiry still covers it
  else
    redis.call('ZREM', registry, member)
  end
  registry_removed(registry)
end

-- Keep the keys of a semaphore only while they are used: the permits set until its last lease
-- ends, the meta hash (limit, fence counter, permit records) `retention` ms longer; both for
-- ever while a permit has no expiry.  Called by every script that writes them, last.
local function sem_expire(permits, meta, retention, now_ms)
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if not last[1] then
    redis.call('PEXPIRE', meta, retention)
    return
  end
  local left = sem_left(last[2], now_ms)
  if not left then
    redis.call('PERSIST', permits)
    redis.call('PERSIST', meta)
    return
  end
  left = math.max(left, 1)
  redis.call('PEXPIRE', permits, left)
  redis.call('PEXPIRE', meta, left + retention)
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
    sem_publish(permits, registry, member, nil, now_ms)  -- the lease got shorter: recompute
  else
    sem_publish(permits, registry, member, expiry, now_ms)
  end
  return fence, pttl
end

-- Give a permit to the waiter next_waiter() just took off the queue (`head` and what follows are
-- its values) and wake it.  `shortest`: the shortest lease granted so far in this round (the
-- next waiter is told of it when its own refresh would come later, see warn_next()); returns it,
-- updated with this grant.
local function sem_serve(permits, meta, registry, member, now_ms, now_us, shortest,
                         head, channel, id, ttl, provisional, info)
  local fence, expiry = sem_grant(permits, meta, head, ttl, provisional, info, now_ms, now_us,
                                  redis.call('HGET', meta, 'fence'))
  sem_publish(permits, registry, member, expiry, now_ms)
  notify(channel, id, int(fence) .. ' ' .. provisional)
  if ttl > 0 and (not shortest or ttl < shortest) then
    return ttl
  end
  return shortest
end

-- After a round of grants whose shortest short lease is `shortest` (nil: none): a waiter looks
-- again when the earliest lease ends, so tell the next one that (no later than `shortest`).
local function sem_warn(permits, queue, waiters, shortest, now_ms, except)
  if not shortest then
    return
  end
  local left = sem_next_end(permits, now_ms)
  if left and left < shortest then shortest = math.max(left, 0) end
  warn_next(queue, waiters, shortest, now_ms, except)
end

-- Serve the FIFO queue while permits are free: each live waiter at the head (next_waiter()) gets a
-- permit and is woken, as for locks.  Stops at `except` (the caller, may be nil).  Returns whether
-- a permit is free with nobody queued ahead of `except`, and whether anyone was granted one here.
local function sem_hand_off(permits, meta, queue, waiters, registry, member, limit, now_ms, now_us, except)
  local granted_any = false
  local shortest
  local free = false
  while redis.call('ZCARD', permits) < limit do
    local head, channel, id, ttl, provisional, info = next_waiter(queue, waiters, now_ms, except)
    if not head then
      free = true
      break
    end
    shortest = sem_serve(permits, meta, registry, member, now_ms, now_us, shortest,
                         head, channel, id, ttl, provisional, info)
    granted_any = true
  end
  sem_warn(permits, queue, waiters, shortest, now_ms, except)
  return free, granted_any
end

-- The permit whose lease ended at `score` left the set: the registry lists the latest lease end,
-- so recompute it only if it may have been this one (and drop it with the last permit).
local function sem_unlisted(permits, registry, member, score, now_ms)
  if redis.call('ZCARD', permits) == 0 then
    redis.call('ZREM', registry, member)
    registry_removed(registry)
  elseif redis.call('ZSCORE', registry, member) == score then
    sem_publish(permits, registry, member, nil, now_ms)
  end
end

-- A release took the hold whose lease ended at `score` (nil: it held nothing) off `permits`: the
-- registry entry and the expiry of the keys follow the holds that are left.
local function sem_settle(permits, meta, registry, member, score, retention, now_ms)
  if score then
    sem_unlisted(permits, registry, member, score, now_ms)
  end
  sem_expire(permits, meta, retention, now_ms)
end
