-- A first-come-first-served line of expiring tickets in front of a lock: every waiter in fair
-- mode holds a ticket, and in notified mode each process's head of line does.
-- KEYS[1]  lock key (value: owner token; followed by '*' when waited for)
-- KEYS[2]  the fencing counter of the lock's slot
-- KEYS[3]  line: a list of tickets (owner tokens) in arrival order
-- KEYS[4]  ticket expiries: a hash of ticket -> expiry (ms, Redis server time)
-- ARGV[1]  operation: 'acquire' or 'leave'
-- ARGV[2]  owner token (the caller's ticket)
-- ARGV[3]  lease TTL in ms                     (acquire)
-- ARGV[4]  ticket TTL in ms                    (acquire)
-- ARGV[5]  '1' to issue a fencing token, else the fence is 0   (acquire)
-- returns  acquire: {1, fence} when taken; {0, ms} when not: wait at most ms before asking again
--          leave:   1
-- A lock taken here, and a lock found busy here, is marked as waited for, so its release
-- (release.lua) announces the first ticket on the lock key's channel (the key followed by
-- ':free'): only its holder wakes. A first ticket leaving a free lock announces the next one.
-- The line expires when no ticket has been refreshed for two ticket TTLs, so abandoned lines
-- do not pile up.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- the first live ticket, dropping expired ones from the front
local function first_ticket(now)
  while true do
    local first = redis.call('LINDEX', KEYS[3], 0)
    if not first then
      return nil
    end
    if tonumber(redis.call('HGET', KEYS[4], first) or '0') > now then
      return first
    end
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], first)
  end
end

local function announce_next(now)
  redis.call('PUBLISH', KEYS[1] .. ':free', first_ticket(now) or '')
end

local op, token = ARGV[1], ARGV[2]
local now = now_ms()

if op == 'acquire' then
  local first = first_ticket(now)
  if (not first or first == token) and redis.call('SET', KEYS[1], token .. '*', 'NX', 'PX', ARGV[3]) then
    if first then
      redis.call('LPOP', KEYS[3])
      redis.call('HDEL', KEYS[4], token)
    end
    return {1, ARGV[5] == '1' and redis.call('INCR', KEYS[2]) or 0}
  end
  local ticket_ttl = tonumber(ARGV[4])
  if redis.call('HSET', KEYS[4], token, now + ticket_ttl) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  redis.call('PEXPIRE', KEYS[3], 2 * ticket_ttl)
  redis.call('PEXPIRE', KEYS[4], 2 * ticket_ttl)
  local holder = redis.call('GET', KEYS[1])
  if holder and string.sub(holder, -1) ~= '*' then
    redis.call('APPEND', KEYS[1], '*')
  end
  local wait = redis.call('PTTL', KEYS[1])
  if wait < 0 then
    -- free, but promised to the first ticket: until it is used or expires
    first = first_ticket(now)
    wait = first and (tonumber(redis.call('HGET', KEYS[4], first)) - now) or 0
  end
  return {0, wait}
elseif op == 'leave' then
  redis.call('LREM', KEYS[3], 1, token)
  redis.call('HDEL', KEYS[4], token)
  if redis.call('EXISTS', KEYS[1]) == 0 then
    announce_next(now)
  end
  return 1
end
return redis.error_reply('unknown operation ' .. tostring(op))
