-- Shared holds: read locks (many readers, or one writer) and semaphore permits (at most N).
-- KEYS[1]  the exclusive lock key: a writer's owner token (as for a mutex), or 'readers' while
--          readers hold the lock, expiring with the last of them; so a plain `SET NX`, which is
--          how a writer first asks (no script), fails while anybody holds the lock
-- KEYS[2]  shared holders: a sorted set of owner token -> lease expiry (ms, Redis server time)
-- KEYS[3]  a waiting writer's intent (its token), which bars new readers while it lives
-- KEYS[4]  the fencing counter of the lock's slot (writers only)
-- ARGV[1]  operation: 'read', 'permit', 'write', 'wrote', 'extend', 'release' or 'abandon'
-- ARGV[2]  owner token
-- ARGV[3]  lease TTL in ms                                  (read, permit, write, extend)
-- ARGV[4]  permits (permit); how the caller waits when busy (read): 'once', 'polls' or
--          'listens'; writer intent TTL in ms (write)
-- ARGV[5]  '1' to issue a fencing token, else the fence is 0   (write)
-- ARGV[6]  how the caller waits when busy: 'polls' or 'listens' (write; a writer that asks
--          once never comes here)
-- returns  read / permit / write: {1, fence} when held (fence 0 for shared holds);
--                                 {0, ms} when busy: wait at most ms before asking again
--          wrote:                 1 (a writer that took KEYS[1] with `SET NX` while its own
--                                 intent stood: the intent is withdrawn, and the readers it held
--                                 back hear the writer's release)
--          extend / release:      1 when the caller's shared hold was extended / released, else 0
--          abandon:               1 when the caller's shared hold or intent was dropped, else 0
-- Expired shared holds are dropped before every decision, so a crashed reader or permit
-- holder blocks nobody past its lease. Every shared release is announced on the lock key's
-- channel (the key followed by ':free'); a writer releases through release.lua like a mutex.
-- A busy exclusive holder is marked as waited for (so its release is announced) only for a
-- caller that listens; a busy writer queues its intent only when it will ask again.
local op, token = ARGV[1], ARGV[2]

local function fence()
  return ARGV[5] == '1' and redis.call('INCR', KEYS[4]) or 0
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

-- how long until the first shared hold expires (0 when there is none)
local function first_expiry()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 1)
  end
  return 0
end

-- the lock key while readers hold it (marked or not)
local function is_readers(value)
  return value == 'readers' or value == 'readers*'
end

-- a waiter for the exclusive holder marks it, so its release is announced
local function mark_waited(holder)
  if string.sub(holder, -1) ~= '*' then
    redis.call('APPEND', KEYS[1], '*')
  end
end

local function hold_shared()
  local ttl = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[2], now + ttl, token)
  if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  return {1, 0}
end

-- drops the caller's shared hold; the lock key then lives as long as the longest remaining
-- read, and the release is announced
local function drop_shared()
  if redis.call('ZREM', KEYS[2], token) == 0 then
    return 0
  end
  if is_readers(redis.call('GET', KEYS[1])) then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    if last[2] then
      redis.call('PEXPIREAT', KEYS[1], last[2])
    else
      redis.call('DEL', KEYS[1])
    end
  end
  redis.call('PUBLISH', KEYS[1] .. ':free', '')
  return 1
end

if op == 'read' then
  local holder = redis.call('GET', KEYS[1])
  if holder and not is_readers(holder) then
    if ARGV[4] == 'listens' then
      mark_waited(holder)
    end
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local intent = redis.call('PTTL', KEYS[3])
  if intent >= 0 then
    return {0, intent}
  end
  local ttl = tonumber(ARGV[3])
  if not holder then
    redis.call('SET', KEYS[1], 'readers', 'PX', ttl)
  elseif redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return hold_shared()
elseif op == 'permit' then
  if redis.call('ZCARD', KEYS[2]) < tonumber(ARGV[4]) then
    return hold_shared()
  end
  return {0, first_expiry()}
elseif op == 'write' then
  local holder = redis.call('GET', KEYS[1])
  local writer = holder and not is_readers(holder)
  local readers = redis.call('ZCARD', KEYS[2])
  local intent = redis.call('GET', KEYS[3])
  if writer or readers > 0 or (intent and intent ~= token) then
    -- the first waiting writer bars new readers, so a stream of them cannot starve it
    if not intent or intent == token then
      redis.call('SET', KEYS[3], token, 'PX', ARGV[4])
    end
    if writer then
      if ARGV[6] == 'listens' then
        mark_waited(holder)
      end
      return {0, redis.call('PTTL', KEYS[1])}
    end
    if readers > 0 then
      return {0, first_expiry()}
    end
    return {0, redis.call('PTTL', KEYS[3])}
  end
  -- readers held back by our intent wait for this writer's release: have it announced
  local announce = intent and '*' or ''
  redis.call('DEL', KEYS[3])
  redis.call('SET', KEYS[1], token .. announce, 'PX', ARGV[3])
  return {1, fence()}
elseif op == 'wrote' then
  if redis.call('GET', KEYS[3]) == token then
    redis.call('DEL', KEYS[3])
    if redis.call('GET', KEYS[1]) == token then
      redis.call('APPEND', KEYS[1], '*')
    end
  end
  return 1
elseif op == 'extend' then
  local expiry = redis.call('ZSCORE', KEYS[2], token)
  if not expiry then
    return 0
  end
  local ttl = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[2], now + ttl, token)
  if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  if is_readers(redis.call('GET', KEYS[1])) and redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return 1
elseif op == 'release' then
  return drop_shared()
elseif op == 'abandon' then
  local dropped = drop_shared()
  if redis.call('GET', KEYS[3]) == token then
    -- a writer that stopped waiting: the readers it held back may come in
    redis.call('DEL', KEYS[3])
    redis.call('PUBLISH', KEYS[1] .. ':free', '')
    dropped = 1
  end
  return dropped
end
return redis.error_reply('unknown operation ' .. tostring(op))
