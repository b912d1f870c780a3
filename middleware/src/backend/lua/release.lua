-- Release a lock, but only for its owner (compare-and-delete); announce it if anybody waits.
-- KEYS[1]  lock key; its announcement channel is the key followed by ':free'
-- ARGV[1]  owner token
-- returns  1 when the owner's lock was deleted, 0 when the key is gone or held by another token
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if holder == ARGV[1] .. '*' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1] .. ':free', '')
  return 1
end
return 0
