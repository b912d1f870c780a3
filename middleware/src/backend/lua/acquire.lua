-- Take a lock if it is free, and issue its fencing token.
-- KEYS[1]  lock key; its value is the holder's owner token, with '*' appended once somebody
--          waits for it (then the release is announced)
-- KEYS[2]  fencing counter of that lock (same hash tag)
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fencing counter TTL in milliseconds (far longer than any lease)
-- ARGV[4]  '*' when others already wait behind the caller, else ''
-- returns  {1, fence} when taken: fence is larger than every token issued before for KEYS[1]
--          {0, pttl}  when busy: the holder's remaining lease in ms (-1: no expiry); the lock
--                     is marked as waited for
if redis.call('SET', KEYS[1], ARGV[1] .. ARGV[4], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, fence}
end
local holder = redis.call('GET', KEYS[1])
if holder and string.sub(holder, -1) ~= '*' then
  redis.call('APPEND', KEYS[1], '*')
end
return {0, redis.call('PTTL', KEYS[1])}
