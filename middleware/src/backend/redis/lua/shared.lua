-- Shared holds: read locks (many readers, or one writer) and semaphore permits (at most N).
-- KEYS[1]  the exclusive lock key: a writer's '<token><mark><record>' (as for a mutex, see
--          release.lua), or 'readers' while readers hold the lock, expiring with the last of
--          them; so a plain `SET NX`, which is how a writer first asks (no script), fails while
--          anybody holds the lock
-- KEYS[2]  shared holders: a sorted set of owner token -> lease expiry (ms, Redis server time)
-- KEYS[3]  waiting writers' intents, each writer's place in line: a hash of token ->
--          '<arrival µs> <expiry ms>' (Redis server time); the first to come has the next
--          writer's turn (the others wait for it), and its intent is followed by '!' once readers
--          alone held it back: it then bars new readers
-- KEYS[4]  the fencing counter of the lock's slot (writers only)
-- KEYS[5]  readers' claims on the next turn: a sorted set of waiting reader's token -> expiry
--          (ms); while one lives, a writer waits unless its intent bars readers
-- KEYS[6]  shared holders' records: a hash of token -> '<since ms> <permits, 0 for a reader>
--          <label>', living as long as KEYS[2]
-- ARGV[1]  operation: 'read', 'permit', 'write', 'wrote', 'extend', 'release' or 'abandon'
-- ARGV[2]  owner token
-- ARGV[3]  lease TTL in ms                                  (read, permit, write, extend)
-- ARGV[4]  permits (permit); how the caller waits when busy (read): 'once', 'polls' or
--          'listens'; writer intent TTL in ms (write)
-- ARGV[5]  '1' to issue a fencing token, else the fence is 0   (write); a reader's claim TTL
--          in ms (read)
-- ARGV[6]  how the caller waits when busy: 'polls' or 'listens' (write; a writer that asks
--          once never comes here); the holder's label (read)
-- ARGV[7]  the holder's label (write); ARGV[5] for a permit
-- returns  read / permit / write: {1, fence} when held (fence 0 for shared holds);
--                                 {0, ms} when busy: wait at most ms before asking again
--          wrote:                 1 when a writer that took KEYS[1] with `SET NX` (finding
--                                 writers' intents or readers' claims) keeps it: its intent is
--                                 withdrawn, and those it held back hear its release; 0 when
--                                 writers that came before it, or readers' claims, come first:
--                                 KEYS[1] is given back
--          extend / release:      1 when the caller's shared hold was extended / released, else 0
--          abandon:               1 when the caller's shared hold, intent or claim was dropped,
--                                 else 0
-- Expired shared holds are dropped before every decision, so a crashed reader or permit
-- holder blocks nobody past its lease. Every shared release is announced on the lock key's
-- channel (the key followed by ':free'); a writer releases through release.lua like a mutex.
-- A busy exclusive holder is marked as waited for (so its release is announced) only for a
-- caller that listens; a busy writer leaves its intent, and a busy reader its claim, only when
-- it will ask again. So readers and writers take turns: readers that waited for a writer come
-- in before the next writer, a writer that waited for readers before the readers after it.
local op, token = ARGV[1], ARGV[2]

local function fence()
  return ARGV[5] == '1' and redis.call('INCR', KEYS[4]) or 0
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)

-- how long until the first member of sorted set `key` expires (0 when there is none)
local function first_expiry(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 1)
  end
  return 0
end

-- the live waiting writers, first come first (expired ones dropped): {token, arrival, expiry,
-- bars}; and the caller's place among them, if it has one
local function writers()
  local fields = redis.call('HGETALL', KEYS[3])
  local live, lapsed, place = {}, {}, nil
  for i = 1, #fields, 2 do
    local arrival, expiry, bar = string.match(fields[i + 1], '^(%d+) (%d+)(!?)$')
    if tonumber(expiry) > now then
      live[#live + 1] = {fields[i], tonumber(arrival), tonumber(expiry), bar == '!'}
    else
      lapsed[#lapsed + 1] = fields[i]
    end
  end
  if #lapsed > 0 then
    redis.call('HDEL', KEYS[3], unpack(lapsed))
  end
  table.sort(live, function(a, b)
    return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1])
  end)
  for i, writer in ipairs(live) do
    if writer[1] == token then
      place = i
    end
  end
  return live, place
end

-- how long until the first of the writers before `place` (all, without one) lapses, if any
local function ahead_expiry(live, place)
  local wait
  for i = 1, (place or #live + 1) - 1 do
    wait = math.min(wait or live[i][3], live[i][3])
  end
  return wait and math.max(wait - now, 1)
end

-- the first waiting writer's bar on readers: how long it stands, if it does
local function bar_expiry(live)
  local first = live[1]
  return first and first[4] and math.max(first[3] - now, 1)
end

-- keeps `key` for at least `ttl` ms
local function keep_for(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- puts the caller in sorted set `key` for `ttl` ms (a hold, or a claim), the set living as
-- long as its last member
local function add_for(key, ttl)
  ttl = tonumber(ttl)
  redis.call('ZADD', key, now + ttl, token)
  keep_for(key, ttl)
end

-- the lock key while readers hold it (marked or not)
local function is_readers(value)
  return value == 'readers' or value == 'readers*'
end

-- a waiter for the exclusive holder marks it, so its release is announced
local function mark_waited(holder)
  if holder == 'readers' then
    redis.call('APPEND', KEYS[1], '*')
  elseif string.sub(holder, 33, 33) == ' ' then
    redis.call('SETRANGE', KEYS[1], 32, '*')
  end
end

-- the caller's shared hold, with its record: `permits` 0 for a reader
local function hold_shared(permits, label)
  add_for(KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[6], token, now .. ' ' .. permits .. ' ' .. label)
  keep_for(KEYS[6], tonumber(ARGV[3]))
  return {1, 0}
end

-- drops the caller's shared hold; the lock key then lives as long as the longest remaining
-- read, and the release is announced
local function drop_shared()
  if redis.call('ZREM', KEYS[2], token) == 0 then
    return 0
  end
  redis.call('HDEL', KEYS[6], token)
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
  local wait
  if holder and not is_readers(holder) then
    if ARGV[4] == 'listens' then
      mark_waited(holder)
    end
    wait = redis.call('PTTL', KEYS[1])
  else
    wait = bar_expiry(writers())
  end
  if wait then
    if ARGV[4] ~= 'once' then
      -- a waiting reader claims the next turn
      add_for(KEYS[5], ARGV[5])
    end
    return {0, wait}
  end
  redis.call('ZREM', KEYS[5], token)
  local ttl = tonumber(ARGV[3])
  if not holder then
    redis.call('SET', KEYS[1], 'readers', 'PX', ttl)
  elseif redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return hold_shared(0, ARGV[6])
elseif op == 'permit' then
  if redis.call('ZCARD', KEYS[2]) < tonumber(ARGV[4]) then
    return hold_shared(ARGV[4], ARGV[5])
  end
  return {0, first_expiry(KEYS[2])}
elseif op == 'write' then
  local holder = redis.call('GET', KEYS[1])
  local writer = holder and not is_readers(holder)
  local readers = redis.call('ZCARD', KEYS[2])
  local live, place = writers()
  local bars = place and live[place][4]
  local ahead = ahead_expiry(live, place)
  local claimed = not bars and redis.call('ZCARD', KEYS[5]) > 0
  if writer or readers > 0 or ahead or claimed then
    -- the writer keeps its place in line (its arrival) while it waits; the first of the line
    -- has the next writer's turn, and once readers alone hold it back (every reader that
    -- claimed the turn came in), it bars new readers, so a stream of them cannot starve it
    local first = not ahead
    local readers_alone = readers > 0 and redis.call('ZCARD', KEYS[5]) == 0
    local mark = (bars or (first and readers_alone)) and '!' or ''
    local arrival = place and live[place][2] or now_us
    local intent_ttl = tonumber(ARGV[4])
    redis.call('HSET', KEYS[3], token, string.format('%d %d', arrival, now + intent_ttl) .. mark)
    if redis.call('PTTL', KEYS[3]) < intent_ttl then
      redis.call('PEXPIRE', KEYS[3], intent_ttl)
    end
    if writer then
      if ARGV[6] == 'listens' then
        mark_waited(holder)
      end
      return {0, redis.call('PTTL', KEYS[1])}
    end
    if readers > 0 then
      return {0, first_expiry(KEYS[2])}
    end
    if ahead then
      return {0, ahead}
    end
    return {0, first_expiry(KEYS[5])}
  end
  -- the readers our intent held back, and the writers behind us, wait for this writer's
  -- release: have it announced
  local mark = #live > 0 and '*' or ' '
  if place then
    redis.call('HDEL', KEYS[3], token)
  end
  local issued = fence()
  local record = now .. ' ' .. issued .. ' w ' .. ARGV[7]
  redis.call('SET', KEYS[1], token .. mark .. record, 'PX', ARGV[3])
  return {1, issued}
elseif op == 'wrote' then
  local live, place = writers()
  local bars = place and live[place][4]
  local holder = redis.call('GET', KEYS[1])
  if ahead_expiry(live, place) or (not bars and redis.call('ZCARD', KEYS[5]) > 0) then
    -- the turn of writers that came first, or of waiting readers: give the lock back, and
    -- wake whoever found it taken meanwhile
    if holder and string.sub(holder, 1, 32) == token then
      redis.call('DEL', KEYS[1])
      if string.sub(holder, 33, 33) == '*' then
        redis.call('PUBLISH', KEYS[1] .. ':free', '')
      end
    end
    return 0
  end
  if place then
    redis.call('HDEL', KEYS[3], token)
  end
  if #live > 0 and holder and string.sub(holder, 1, 33) == token .. ' ' then
    redis.call('SETRANGE', KEYS[1], 32, '*')
  end
  return 1
elseif op == 'extend' then
  local expiry = redis.call('ZSCORE', KEYS[2], token)
  if not expiry then
    return 0
  end
  local ttl = tonumber(ARGV[3])
  add_for(KEYS[2], ttl)
  keep_for(KEYS[6], ttl)
  if is_readers(redis.call('GET', KEYS[1])) then
    keep_for(KEYS[1], ttl)
  end
  return 1
elseif op == 'release' then
  return drop_shared()
elseif op == 'abandon' then
  local dropped = drop_shared()
  local intent = redis.call('HDEL', KEYS[3], token) == 1
  if redis.call('ZREM', KEYS[5], token) == 1 or intent then
    -- a writer or reader that stopped waiting: those it held back may come in
    redis.call('PUBLISH', KEYS[1] .. ':free', '')
    dropped = 1
  end
  return dropped
end
return redis.error_reply('unknown operation ' .. tostring(op))
