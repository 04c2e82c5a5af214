-- Include: a semaphore's permits. Includes no other file.
-- A semaphore's key KEYS[1] is a sorted set of its permits, "<owner>:<fencing token>" scored by the
-- server time (ms) each lease ends, and of its limit, the member "limit:<N>" scored -inf (so the
-- limit lives exactly as long as the set: while a permit or a waiter lasts). KEYS[2..5] are the
-- semaphore's fence, waiter queue, queue lapses and channel, as a lock's.
--
-- stored_limit() -> the stored limit N, or nil when none is stored.
-- live_members(now) -> the members whose lease ends after `now` (ms).
-- permits_free(now) -> the limit minus the live permits; 0 without a stored limit.
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
