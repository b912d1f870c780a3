-- Extend a lease, but only for its owner (compare-and-pexpire); record the holder's fence the
-- first time it is known to the store.
-- KEYS[1]  lock key: '<token><mark><record>' (see release.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new lease TTL in milliseconds, counted from now
-- ARGV[3]  the holder's fencing token, 0 without one: written into a record that has none yet
--          (a lock taken with the plain `SET NX PX` learns its fence from the `INCR` beside it)
-- returns  1 when the owner's lease was extended, 0 when the key is gone or held by another token
local holder = redis.call('GET', KEYS[1])
if not holder or string.sub(holder, 1, 32) ~= ARGV[1] then
  return 0
end
if ARGV[3] ~= '0' then
  local since, fence, rest = string.match(string.sub(holder, 34), '^(%d+) (%d+) (.*)$')
  if fence == '0' then
    local record = since .. ' ' .. ARGV[3] .. ' ' .. rest
    redis.call('SET', KEYS[1], string.sub(holder, 1, 33) .. record, 'PX', ARGV[2])
    return 1
  end
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
