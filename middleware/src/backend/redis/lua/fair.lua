-- A first-come-first-served line of expiring tickets in front of a lock: every waiter in fair
-- mode holds a ticket, and in notified mode each process's head of line does.
-- KEYS[1]  lock key: '<token><mark><record>' (see release.lua)
-- KEYS[2]  the fencing counter of the lock's slot
-- KEYS[3]  line: a list of tickets (owner tokens) in arrival order
-- KEYS[4]  ticket terms: a hash of ticket -> '<expiry ms, Redis server time> <lease TTL ms>
--          <fencing 0|1> <label>' (what release.lua needs to hand the lock to the ticket)
-- ARGV[1]  operation: 'acquire' or 'leave'
-- ARGV[2]  owner token (the caller's ticket)
-- ARGV[3]  lease TTL in ms                     (acquire)
-- ARGV[4]  ticket TTL in ms                    (acquire)
-- ARGV[5]  '1' to issue a fencing token, else the fence is 0   (acquire)
-- ARGV[6]  the holder's label                  (acquire)
-- returns  acquire: {1, fence} when taken; {0, ms} when not: wait at most ms before asking again
--          leave:   1 when the lock had been handed to the leaving ticket (the caller releases
--                   it), else 0
-- A lock taken here, and a lock found busy here, is marked as waited for, so its release
-- (release.lua) goes to the first ticket: handed to it, or announced on the lock key's channel
-- (the key followed by ':free') for it to take. A ticket that asks again holding a lock handed
-- to it (its announcement was lost or not heard yet) gets it with a fresh lease and fence. A
-- first ticket leaving a free lock announces the next one.
-- The line expires when no ticket has been refreshed for two ticket TTLs, so abandoned lines
-- do not pile up.
-- These are the queue's rules of backend/ticket_rules.rs, which the memory and SQL backends run;
-- the conformance case a_queue_follows_the_ticket_rules holds this script to them.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function expiry_of(ticket)
  return tonumber(string.match(redis.call('HGET', KEYS[4], ticket) or '', '^%d+') or '0')
end

-- the first live ticket, dropping expired ones from the front
local function first_ticket(now)
  while true do
    local first = redis.call('LINDEX', KEYS[3], 0)
    if not first then
      return nil
    end
    if expiry_of(first) > now then
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

-- the caller takes the lock, marked as waited for, with a fresh fence: its fence
local function take()
  local fence = ARGV[5] == '1' and redis.call('INCR', KEYS[2]) or 0
  local record = now .. ' ' .. fence .. ' m ' .. ARGV[6]
  redis.call('SET', KEYS[1], token .. '*' .. record, 'PX', ARGV[3])
  return fence
end

-- whether `holder` (the lock key's value) is the caller's lock, handed to its ticket
local function handed(holder)
  return holder and string.sub(holder, 1, 33) == token .. '*'
end

if op == 'acquire' then
  local holder = redis.call('GET', KEYS[1])
  if handed(holder) then
    return {1, take()}
  end
  local first = first_ticket(now)
  if not holder and (not first or first == token) then
    if first then
      redis.call('LPOP', KEYS[3])
      redis.call('HDEL', KEYS[4], token)
    end
    return {1, take()}
  end
  local ticket_ttl = tonumber(ARGV[4])
  local terms = (now + ticket_ttl) .. ' ' .. ARGV[3] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6]
  if redis.call('HSET', KEYS[4], token, terms) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  redis.call('PEXPIRE', KEYS[3], 2 * ticket_ttl)
  redis.call('PEXPIRE', KEYS[4], 2 * ticket_ttl)
  if holder == 'readers' then
    redis.call('APPEND', KEYS[1], '*')
  elseif holder and string.sub(holder, 33, 33) == ' ' then
    redis.call('SETRANGE', KEYS[1], 32, '*')
  end
  local wait = redis.call('PTTL', KEYS[1])
  if wait < 0 then
    -- free, but promised to the first ticket: until it is used or expires
    first = first_ticket(now)
    wait = first and (expiry_of(first) - now) or 0
  end
  return {0, wait}
elseif op == 'leave' then
  redis.call('LREM', KEYS[3], 1, token)
  redis.call('HDEL', KEYS[4], token)
  local holder = redis.call('GET', KEYS[1])
  if handed(holder) then
    return 1
  end
  if not holder then
    announce_next(now)
  end
  return 0
end
return redis.error_reply('unknown operation ' .. tostring(op))
