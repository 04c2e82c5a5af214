local function corrupt_fence(key, why)
  return redis.error_reply('WRONGTYPE dlock fence key ' .. key .. ' does not hold a token (' .. why .. ')')
end
local function next_token(key)
  local fence = redis.call('GET', key)
  if fence then
    if not string.match(fence, '^%d+$') then return nil, 'not a decimal integer' end
  else
    local now = redis.call('TIME')
    redis.call('SET', key, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.pcall('INCR', key)
  if type(token) == 'table' and token.err then return nil, token.err end
  return token
end
local function grant(before_set)
  local token, why = next_token(KEYS[2])
  if not token then return corrupt_fence(KEYS[2], why) end
  if before_set then before_set() end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, token}
end
