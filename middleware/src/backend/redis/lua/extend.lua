-- Extend a lease, but only for its owner (compare-and-pexpire).
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new lease TTL in milliseconds, counted from now
-- returns  1 when the owner's lease was extended, 0 when the key is gone or held by another token
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '*' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
