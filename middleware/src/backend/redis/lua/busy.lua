-- After a plain `SET NX PX` found the lock taken: mark it as waited for, and tell how long the
-- holder has left.
-- KEYS[1]  lock key
-- returns  the holder's remaining lease in ms (-1: no expiry, -2: released meanwhile)
local holder = redis.call('GET', KEYS[1])
if holder and string.sub(holder, -1) ~= '*' then
  redis.call('APPEND', KEYS[1], '*')
end
return redis.call('PTTL', KEYS[1])
