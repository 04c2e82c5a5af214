-- renew_holds: renews leases of every kind in one call.
-- KEYS[i]          each lease's key (a lock's or a semaphore's)
-- ARGV[3i-2]       lease i's kind: 'x' exclusive (the owner token is the key's value), 's' shared
--                  or 'p' permit (the member is in the key's sorted set)
-- ARGV[3i-1]       lease i's owner token or member (for 's' and 'p' an owner without ':' stands
--                  for its member, whatever its token on this server: redlock's case)
-- ARGV[3i]         lease i's ttl in ms
-- Returns {r1, r2, ...}: 1 renewed, 0 the lease ended (expired, broken, taken); an expired member
-- of ours is removed.
-- The keys of one call belong to many names, so many hash slots: a Redis Cluster refuses such a
-- script (CROSSSLOT). dlock has no cluster mode yet (issue 30): on a cluster the batch would have
-- to be split by slot, one call per slot (docs/backends/redis.md, "Server requirements").
-- Includes: none
local now
local result = {}
for i, key in ipairs(KEYS) do
  local kind, member, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  result[i] = 0
  if kind == 'x' then
    if redis.pcall('GET', key) == member then
      redis.call('PEXPIRE', key, ttl)
      result[i] = 1
    end
  else
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    if not string.find(member, ':', 1, true) then  -- an owner (redlock's value): its member on this server
      local all = redis.pcall('ZRANGE', key, 0, -1)
      if not all.err then
        for _, m in ipairs(all) do
          if string.sub(m, 1, #member + 1) == member .. ':' then member = m end
        end
      end
    end
    local score = redis.pcall('ZSCORE', key, member)
    if type(score) == 'string' then
      if tonumber(score) > now then
        redis.call('ZADD', key, 'XX', now + ttl, member)
        if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
        result[i] = 1
      else
        redis.call('ZREM', key, member)
      end
    end
  end
end
return result
