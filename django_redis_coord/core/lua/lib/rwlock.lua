-- Helpers of the read-write lock scripts (rw_*.lua); loaded after common.lua and lib/semaphore.lua.

-- Read-write locks.  The sorted set at the name maps each hold's token to the end of its lease
-- (ms, server time; +inf: no expiry), and the meta hash keeps the fence counter and one record
-- per hold, "p:<token>" = "fence since claim info": the layout of a semaphore's permits, kept by
-- the same helpers (lib/semaphore.lua).  The first letter of a token is its mode, 'r' (read) or
-- 'w' (write), for holders and queued waiters alike; all the holders of a lock hold in one mode.

-- The mode the lock is held in, after dropping the holds whose lease ended: 'r', 'w', '' (free),
-- or false (nothing written) when the name holds another kind of value (a lock's token, a
-- semaphore's permits: members without a hold record of this lock).
local function rw_mode(holders, meta, now_ms)
  local first = redis.pcall('ZRANGE', holders, 0, 0)
  if first.err then
    return false
  end
  if not first[1] then
    return ''
  end
  if redis.call('HEXISTS', meta, 'p:' .. first[1]) == 0 then
    return false
  end
  if sem_reclaim(holders, meta, now_ms) > 0 then
    first = redis.call('ZRANGE', holders, 0, 0)
    if not first[1] then
      return ''
    end
  end
  return string.sub(first[1], 1, 1)
end

-- Serve the FIFO queue while its head may join the holders (held in `mode`): readers while no
-- writer holds, one writer once nobody holds.  Live waiters are taken in arrival order (dead
-- ones dropped: next_waiter()), each granted and woken as a semaphore's waiters are.  Stops at
-- `except` (the caller, may be nil).  Returns the mode the lock is held in afterwards, and
-- whether nobody live is queued ahead of `except` (false when a writer holds: not looked at).
local function rw_hand_off(holders, meta, queue, waiters, registry, member, mode, now_ms, now_us, except)
  local shortest
  while mode ~= 'w' do
    local blocked
    if mode == 'r' then blocked = 'w' end
    local head, channel, id, ttl, provisional, info = next_waiter(queue, waiters, now_ms, except, blocked)
    if not head then
      break
    end
    shortest = sem_serve(holders, meta, registry, member, now_ms, now_us, shortest,
                         head, channel, id, ttl, provisional, info)
    mode = string.sub(head, 1, 1)
  end
  sem_warn(holders, queue, waiters, shortest, now_ms, except)
  if mode == 'w' then
    return mode, false
  end
  local first = redis.call('ZRANGE', queue, 0, 0)[1]
  return mode, not first or first == except
end

-- The hold of `token` (a live member of the holders) is the caller's: it was handed over, or this
-- call was sent twice.  The caller is alive, so it gets its full lease now (a provisional hand-off
-- is claimed here) and leaves the queue.  Returns the acquire scripts' reply.
local function rw_held(holders, meta, queue, waiters, registry, member, token, ttl, retention, now_ms)
  redis.call('ZREM', queue, token)
  redis.call('HDEL', waiters, token)
  local fence, pttl = sem_claim(holders, meta, registry, member, token, ttl, now_ms)
  sem_expire(holders, meta, retention, now_ms)
  return {1, fence, pttl, 0}
end
