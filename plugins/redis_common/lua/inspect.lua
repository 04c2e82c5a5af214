-- inspect: the holder of a lock, read only.
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key
-- Returns {holder, pttl, fence}: holder the exclusive owner token, or for a lock held shared its
-- longest-lived shared holder's owner, or false when free; pttl the lock key's ms left (-2: no key,
-- -1: no expiry); fence the fence key's value, or false when it has none.
-- Includes: none
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1)[1]
  holder = last and string.match(last, '^(.*):%d+$') or false
end
return {holder, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
