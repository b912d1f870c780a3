-- Take several locks at once, all or none (one Redis node: the keys may span hash slots).
-- KEYS     lock key 1, the fencing counter of its slot, lock key 2, its counter, ...
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- returns  {1, fence 1, fence 2, ...} when every lock was taken
--          {0, pttl} when one is held: that holder's remaining lease in ms (-1: no expiry);
--                    it is marked as waited for, and nothing was taken
for i = 1, #KEYS, 2 do
  local holder = redis.call('GET', KEYS[i])
  if holder then
    if string.sub(holder, -1) ~= '*' then
      redis.call('APPEND', KEYS[i], '*')
    end
    return {0, redis.call('PTTL', KEYS[i])}
  end
end
local taken = {1}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  taken[#taken + 1] = redis.call('INCR', KEYS[i + 1])
end
return taken
