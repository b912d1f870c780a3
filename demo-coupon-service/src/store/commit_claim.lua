-- Write a claim (new remaining stock + claim record), refusing a stale lock holder.
-- KEYS[1]  coupon hash (`remaining` field)
-- KEYS[2]  claims list
-- KEYS[3]  the coupon lock's fencing counter (tower-lock's `{lock:coupon:<id>}:fence`);
--          only for a fenced write
-- ARGV[1]  new remaining stock
-- ARGV[2]  user id
-- ARGV[3]  the writer's fencing token, or '' for an unfenced write
-- returns  1 when written, 0 when a newer token was issued since the writer's (nothing written)
-- The demo runs on one Redis node: these keys need not share a Cluster slot.
if ARGV[3] ~= '' then
  local newest = tonumber(redis.call('GET', KEYS[3]) or '0')
  if newest > tonumber(ARGV[3]) then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
