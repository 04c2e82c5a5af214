-- Include: the grant of a free lock, shared by the acquire scripts that issue fencing tokens.
-- Uses KEYS[1] the lock key, KEYS[2] the fence key; ARGV[1] the owner token, ARGV[2] the ttl (ms).
-- Includes no other file.
--
-- corrupt_fence(key, why) -> a WRONGTYPE error reply naming the fence key `key` and `why`.
-- next_token(key) -> the next fencing token (an integer) from the fence key `key`, or nil and why
--   the key holds no token.
-- grant(before_set) -> {1, token}: takes a token (next_token(KEYS[2])), runs `before_set` (a
--   function, or nil), then sets the lock key KEYS[1] to ARGV[1] for ARGV[2] ms; or the error
--   reply of corrupt_fence when the fence key is not a token.
--
-- The lock key is written last, after every check passed, because a script's writes before an
-- error are not undone: GET raises WRONGTYPE on a lock key of another type (an error, never
-- "held"); the fence key must hold digits only (Lua's tonumber would also take "1.5", " 7" or
-- "-3"), and INCR, run before the SET, refuses what is left (leading zeros, a value that would
-- overflow) - so a lock is never set without its token. (The seed in next_token is the only
-- earlier write; INCR cannot fail on it.)
-- A missing fence key (a name's first lock, or a server that restarted without its data) is seeded
-- with the server's TIME in microseconds before INCR: tokens then keep rising across a loss of the
-- data, as long as the server's clock does not go back and fewer than one lock per microsecond was
-- taken since the previous seed. Starting again at 1 would let a resource that saw the old tokens
-- accept a stale holder's writes (docs/design/faults.md section 6, restart delayed past the ttl).
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
