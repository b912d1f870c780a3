-- Release a lock, but only for its owner (compare-and-delete); announce it if anybody waits.
-- KEYS[1]  lock key; its announcement channel is the key followed by ':free'
-- KEYS[2]  the lock's line of tickets (fair.lua), in arrival order
-- KEYS[3]  the tickets' expiries (ms, Redis server time)
-- ARGV[1]  owner token
-- returns  1 when the owner's lock was deleted, 0 when the key is gone or held by another token
-- A lock marked as waited for (its token followed by '*') announces its release: naming the
-- first live ticket of the line, the only waiter that may take it next, or '' (anybody may).
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if holder ~= ARGV[1] .. '*' then
  return 0
end
redis.call('DEL', KEYS[1])
local next = redis.call('LINDEX', KEYS[2], 0) or ''
if next ~= '' then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  if tonumber(redis.call('HGET', KEYS[3], next) or '0') <= now then
    -- expired: fair.lua drops it at the next attempt, and anybody may try
    next = ''
  end
end
redis.call('PUBLISH', KEYS[1] .. ':free', next)
return 1
