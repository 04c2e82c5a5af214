local function stored_limit()
  local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '-inf', 'LIMIT', 0, 1)[1]
  return m and tonumber(string.sub(m, 7))
end
local function live_members(now)
  return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
end
local function permits_free(now)
  local limit = stored_limit()
  if not limit then return 0 end
  return limit - #live_members(now)
end
