--!include "includes/grant.lua"
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  redis.call('ZCARD', KEYS[1])
  return {0, redis.call('PTTL', KEYS[1]), 1}
elseif holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return grant(nil)
