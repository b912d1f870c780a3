-- After a plain `SET NX PX` found the lock taken: mark it as waited for, and tell how long the
-- holder has left.
-- KEYS[1]  lock key: '<token><mark><record>' (see release.lua), or 'readers' while readers hold
--          it
-- returns  the holder's remaining lease in ms (-1: no expiry, -2: released meanwhile)
local holder = redis.call('GET', KEYS[1])
if holder == 'readers' then
  redis.call('APPEND', KEYS[1], '*')
elseif holder and string.sub(holder, 33, 33) == ' ' then
  redis.call('SETRANGE', KEYS[1], 32, '*')
end
return redis.call('PTTL', KEYS[1])
