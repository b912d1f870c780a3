-- Read a coupon's stock for a fenced claim, registering the reader's fencing token.
-- KEYS[1]  coupon hash (`supply`, `remaining`; `fence`: the largest token that has read it)
-- ARGV[1]  the reader's fencing token
-- returns  {supply, remaining}, both nil when there is no such coupon
-- From this read on, commit_claim.lua refuses the writes of every older token: a stale holder
-- cannot write between a newer holder's read and that holder's write.
local stock = redis.call('HMGET', KEYS[1], 'supply', 'remaining')
if stock[1] and tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
return stock
