-- Take several locks at once, all or none (one Redis node: the keys may span hash slots).
-- KEYS     lock key 1, the fencing counter of its slot, lock key 2, its counter, ...
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  '1' to issue fencing tokens, else every fence is 0
-- ARGV[4]  the holder's label (each lock key's value: '<token> <since ms> <fence> m <label>',
--          see release.lua)
-- returns  {1, fence 1, fence 2, ...} when every lock was taken
--          {0, pttl} when one is held (by a holder or by readers): that holder's remaining
--                    lease in ms (-1: no expiry); nothing was taken. Waiters for several locks
--                    poll, so nothing is marked as waited for.
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {0, redis.call('PTTL', KEYS[i])}
  end
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local taken = {1}
for i = 1, #KEYS, 2 do
  local fence = ARGV[3] == '1' and redis.call('INCR', KEYS[i + 1]) or 0
  local record = now .. ' ' .. fence .. ' m ' .. ARGV[4]
  redis.call('SET', KEYS[i], ARGV[1] .. ' ' .. record, 'PX', ARGV[2])
  taken[#taken + 1] = fence
end
return taken
