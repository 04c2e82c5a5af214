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
