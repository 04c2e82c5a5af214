-- Include: the member of a shared hold or a permit in the sorted set KEYS[1]. Includes no other file.
--
-- find_member(owner, token) -> "<owner>:<token>", or when `token` is "" (the grant's reply was
--   lost) the first member of KEYS[1] that starts with "<owner>:", or nil when there is none.
local function find_member(owner, token)
  if token ~= '' then return owner .. ':' .. token end
  local all = redis.call('ZRANGE', KEYS[1], 0, -1)
  for _, m in ipairs(all) do
    if string.sub(m, 1, #owner + 1) == owner .. ':' then return m end
  end
  return nil
end
