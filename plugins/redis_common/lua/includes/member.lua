local function find_member(owner, token)
  if token ~= '' then return owner .. ':' .. token end
  local all = redis.call('ZRANGE', KEYS[1], 0, -1)
  for _, m in ipairs(all) do
    if string.sub(m, 1, #owner + 1) == owner .. ':' then return m end
  end
  return nil
end
