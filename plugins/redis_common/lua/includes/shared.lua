local function lock_holder(now)
  local v = redis.pcall('GET', KEYS[1])
  if type(v) ~= 'table' then return v end
  if #redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, 1) > 0 then return true end
  redis.call('DEL', KEYS[1])
  return false
end
local function writer_ahead(member)
  local mine = redis.call('ZSCORE', KEYS[3], member)
  for offset = 0, 900, 100 do
    local ahead
    if mine then
      ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. mine, 'LIMIT', offset, 100)
    else
      ahead = redis.call('ZRANGE', KEYS[3], offset, offset + 99)
    end
    for _, m in ipairs(ahead) do
      if string.sub(m, 1, 2) ~= 's:' then return true end
    end
    if #ahead < 100 then
      if mine then
        for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], mine, mine, 'LIMIT', 0, 100)) do
          if m < member and string.sub(m, 1, 2) ~= 's:' then return true end
        end
      end
      return false
    end
  end
  return true
end
local function wake_reader_at_head(now, now_us, claim_ms, prefix)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if first and string.sub(first, 1, 2) == 's:' then wake_first(1, now, now_us, claim_ms, prefix) end
end
local function drop_expired_members(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '(-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then redis.call('ZREM', KEYS[1], unpack(expired)) end
end
-- The key lives as long as its longest-lived member, and at least `floor_ms`; gone when nothing is left.
local function expire_with_members(now, floor_ms)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local keep = floor_ms
  if last[1] and string.sub(last[1], 1, 6) ~= 'limit:' then keep = math.max(keep, tonumber(last[2]) - now) end
  if keep > 0 and #last > 0 then redis.call('PEXPIRE', KEYS[1], math.ceil(keep))
  else redis.call('DEL', KEYS[1]) end
end
