-- Write a claim (new remaining stock + claim record), refusing a stale lock holder.
-- KEYS[1]  coupon hash (`remaining`; `fence`: the largest fencing token that has read it)
-- KEYS[2]  claims list
-- ARGV[1]  new remaining stock
-- ARGV[2]  user id
-- ARGV[3]  the writer's fencing token, or '' for an unfenced write
-- returns  1 when written, 0 when a newer token has read the coupon since the writer did
--          (nothing written)
if ARGV[3] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') > tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
