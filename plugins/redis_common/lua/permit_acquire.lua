-- permit_acquire: one permit of a semaphore.
-- KEYS[1]  the semaphore's permits key (sorted set: permits and "limit:<N>", see includes/semaphore.lua)
-- KEYS[2]  the fence key
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- ARGV[1]  owner token (its member is "<owner>:<token>")
-- ARGV[2]  ttl in ms
-- ARGV[3]  mode, as queue_acquire.lua (0 barging, 1 fair try, 2 fair wait)
-- ARGV[4]  entry_grace_ms
-- ARGV[5]  the limit N
-- ARGV[6]  claim_ms
-- ARGV[7]  the waiters' channel prefix
-- Granted while fewer than N permits are live and (mode 0) or fewer waiters than free permits
-- queue, or this one is among the first `free` of the queue. A fair waiter refused while permits
-- are free wakes those of the first `free` waiters nobody woke (and their standby), and waits
-- until the soonest of their claims lapses. A stored limit that nobody holds or waits under any
-- more (its permits expired, its waiters' entries lapsed or left) is no limit: the set is then
-- dropped and this acquire's N stored.
-- Returns
--   {1, token}       granted
--   {0, wait_ms, 1}  all permits held: wait_ms until the soonest one ends
--   {0, wait_ms, 0}  free ones go to waiters queued first: wait_ms until the soonest of their claims lapses
--   {-1, stored}     another limit stands: the stored limit
--   an error         a fence key that holds no token (as acquire.lua)
-- Includes: includes/grant.lua, includes/queue.lua, includes/shared.lua, includes/semaphore.lua
--!include "includes/grant.lua"
--!include "includes/queue.lua"
--!include "includes/shared.lua"
--!include "includes/semaphore.lua"
local mode = tonumber(ARGV[3])
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[5])
local now, now_us = server_time()
local stored = stored_limit()
if stored and stored ~= limit then
  drop_lapsed(now)
  if #live_members(now) > 0 or redis.call('ZRANGE', KEYS[3], 0, 0)[1] then return {-1, stored} end
  redis.call('DEL', KEYS[1])
end
drop_expired_members(now)
local free = limit - #live_members(now)
local ahead = {}
if mode > 0 then
  drop_lapsed(now)
  if free > 0 then
    ahead = redis.call('ZRANGE', KEYS[3], 0, free - 1)
    local mine = false
    for _, m in ipairs(ahead) do
      if m == ARGV[1] then mine = true end
    end
    if #ahead >= free and not mine then
      wake_first(free, now, now_us, tonumber(ARGV[6]), ARGV[7], ARGV[1], true)
      ahead = redis.call('ZRANGE', KEYS[3], 0, free - 1)
    end
  end
end
local admitted = free > 0 and (mode == 0 or #ahead < free)
if free > 0 and not admitted then
  for _, m in ipairs(ahead) do
    if m == ARGV[1] then admitted = true end
  end
end
if admitted then
  local token, why = next_token(KEYS[2])
  if not token then return corrupt_fence(KEYS[2], why) end
  redis.call('ZADD', KEYS[1], '-inf', 'limit:' .. limit)
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1] .. ':' .. string.format('%d', token))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then redis.call('ZREM', KEYS[4], ARGV[1]) end
  return {1, token}
end
local wait_ms
if free <= 0 then
  local soonest = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  wait_ms = math.ceil(tonumber(soonest[2]) - now)
else
  wait_ms = soonest_lapse_in(free, now)
end
if mode == 2 then
  enqueue(ARGV[1], now, now_us, wait_ms, tonumber(ARGV[4]))
  redis.call('ZADD', KEYS[1], '-inf', 'limit:' .. limit)
  local keep = math.max(wait_ms, 0) + tonumber(ARGV[4])
  if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
end
return {0, wait_ms, free <= 0 and 1 or 0}
