-- Release a lock, but only for its owner (compare-and-delete); if anybody waits, hand it over
-- or announce it.
-- KEYS[1]  lock key: '<token><mark><record>' — the holder's owner token (32 hex digits), '*'
--          once the lock is waited for (else ' '), then its record: '<since ms> <fence> <m|w> <label>'
--          (when it took the lock, its fencing token or 0 while unknown, a mutex or a writer,
--          its locker's label);
--          its announcement channel is the key followed by ':free'
-- KEYS[2]  the lock's line of tickets (fair.lua), in arrival order
-- KEYS[3]  the tickets' terms: '<expiry ms, Redis server time> <lease TTL ms> <fencing 0|1>
--          <label>'
-- KEYS[4]  the fencing counter of the lock's slot
-- KEYS[5]  readers' claims on the next turn (shared.lua): token -> expiry (ms, Redis server time)
-- ARGV[1]  owner token
-- returns  1 when the owner's lock was released, 0 when the key is gone or held by another token,
--          2 when KEYS[2..5] were left out and the lock is marked as waited for: nothing was
--          done, call again with them (an uncontended release sends the lock key alone)
-- A lock marked as waited for goes to the first live ticket of
-- the line: when the ticket outlives the lease it asked for, the lock is handed to it here
-- (announced as '<ticket> <fence>': it holds the lock on hearing this), else the release
-- announces '<ticket>', the only waiter that may take it next. With no live ticket, or while
-- readers claim the next turn (a writer released), the announcement is '' (anybody may take
-- it).
-- These are the queue's rules of backend/ticket_rules.rs, which the memory and SQL backends run;
-- the conformance case a_queue_follows_the_ticket_rules holds this script to them.
local holder = redis.call('GET', KEYS[1])
if not holder or string.sub(holder, 1, 32) ~= ARGV[1] then
  return 0
end
if string.sub(holder, 33, 33) ~= '*' then
  redis.call('DEL', KEYS[1])
  return 1
end
if #KEYS == 1 then
  return 2
end
local channel = KEYS[1] .. ':free'
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local readers_wait = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf') > 0
while not readers_wait do
  local next = redis.call('LINDEX', KEYS[2], 0)
  if not next then
    break
  end
  local terms = redis.call('HGET', KEYS[3], next) or ''
  local expiry = tonumber(string.match(terms, '^%d+') or '0')
  if expiry > now then
    local ttl, fencing, label = string.match(terms, '^%d+ (%d+) (%d) ?(.*)$')
    if not ttl or expiry - now < tonumber(ttl) then
      -- the ticket may expire before the lease would: it takes the lock itself, or expires
      redis.call('DEL', KEYS[1])
      redis.call('PUBLISH', channel, next)
      return 1
    end
    redis.call('LPOP', KEYS[2])
    redis.call('HDEL', KEYS[3], next)
    local fence = fencing == '1' and redis.call('INCR', KEYS[4]) or 0
    redis.call('SET', KEYS[1], next .. '*' .. now .. ' ' .. fence .. ' m ' .. label, 'PX', ttl)
    redis.call('PUBLISH', channel, next .. ' ' .. fence)
    return 1
  end
  redis.call('LPOP', KEYS[2])
  redis.call('HDEL', KEYS[3], next)
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', channel, '')
return 1
