-- Take a lock if it is free, and issue its fencing token.
-- KEYS[1]  lock key; its value is the holder's owner token
-- KEYS[2]  fencing counter of that lock (same hash tag)
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fencing counter TTL in milliseconds (far longer than any lease)
-- returns  {1, fence} when taken: fence is larger than every token issued before for KEYS[1]
--          {0, pttl}  when busy: the holder's remaining lease in ms (-1: no expiry)
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
