-- holders: every live holder of a lock or of a semaphore, read only.
-- KEYS[1]  the lock key, or the semaphore's permits key
-- KEYS[2]  the fence key
-- ARGV[1]  'lock' | 'semaphore'
-- Returns a flat list, five elements per holder: kind ('x' exclusive, 's' shared, 'p' permit),
-- owner, fencing token, ms left, limit (a semaphore's; 0 for a lock); {} when nobody holds it.
-- A break's tombstone at a lock key (break_tombstone) is listed as an 'x' holder: the caller skips it.
-- Includes: includes/queue.lua (server_time)
--!include "includes/queue.lua"
local now = server_time()
local kind = 'p'
if ARGV[1] == 'lock' then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' then
    return {'x', v, redis.call('GET', KEYS[2]) or '0', redis.call('PTTL', KEYS[1]), 0}
  elseif not v then
    return {}
  end
  kind = 's'
end
local out = {}
local limit = 0
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local m = members[i]
  if string.sub(m, 1, 6) == 'limit:' then
    limit = tonumber(string.sub(m, 7))
  elseif tonumber(members[i + 1]) > now then
    local owner, token = string.match(m, '^(.*):(%d+)$')
    if owner then
      for _, x in ipairs({kind, owner, token, math.floor(tonumber(members[i + 1]) - now), limit}) do table.insert(out, x) end
    end
  end
end
return out
