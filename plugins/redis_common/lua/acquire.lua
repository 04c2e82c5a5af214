-- acquire: an exclusive hold of a free lock, without a waiter queue.
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key (the counter of fencing tokens)
-- ARGV[1]  owner token (the lock key's value while held)
-- ARGV[2]  ttl in ms (decimal)
-- Returns
--   {1, token}    granted; token is the fencing token (integer)
--   {0, pttl}     held by another exclusive holder; pttl its key's ms left (-1: no expiry)
--   {0, pttl, 1}  held by shared holders (the lock key is their sorted set)
--   an error      WRONGTYPE: the lock key is of another type (ZCARD raises it, so the caller hears
--                 "another type", never "held"), or the fence key holds no token
-- Includes: includes/grant.lua
--!include "includes/grant.lua"
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  redis.call('ZCARD', KEYS[1])
  return {0, redis.call('PTTL', KEYS[1]), 1}
elseif holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return grant(nil)
