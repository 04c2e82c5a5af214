-- redlock_acquire: redlock's exclusive hold on one node, with a waiter queue whose order the nodes
-- agree on: each waiter enqueues with the same score (its arrival time, chosen once by its client)
-- and the same member on every node, and a sorted set orders equal scores by member, so every node
-- that holds the same entries has the same first waiter. A free node grants only to its first
-- waiter (or to anyone when nobody queues); a refused waiter (re-)enqueues wherever it is refused,
-- so an entry missing on some nodes is back after that waiter's next round. Only the lock key's
-- quorum decides who holds the lock: the queue orders the grants, it never grants by itself.
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key (read by no redlock script: redlock issues no fencing token)
-- KEYS[3]  the waiter queue (scores chosen by the clients)
-- KEYS[4]  the queue's lapses
-- ARGV[1]  the value of this round (the lock key's value while held)
-- ARGV[2]  ttl in ms
-- ARGV[3]  the waiter's queue member
-- ARGV[4]  its score (arrival time, us on the nodes' clock)
-- ARGV[5]  mode: 0 barging try, 1 fair try, 2 fair wait (queues us), 3 barging wait (grants
--          whatever queues, queues us when refused)
-- ARGV[6]  entry_grace_ms
-- ARGV[7]  claim_ms
-- ARGV[8]  the waiters' channel prefix
-- A fair round refused while the lock is free wakes the first waiter if nobody did
-- (wake_sleeping_head: shared holders' releases wake nobody by name).
-- Returns
--   {1, 0}  granted (no fencing token: each node's counter counts only the grants that reached it,
--           so a quorum's counters are not monotonic across holders; the grant bumps no counter)
--   {0, wait_ms, shared, held, now_us}  refused: wait_ms until the holder's key expires (-1: no
--           expiry) or, when the lock is free, until the first waiter's entry lapses; shared 1 when
--           held by shared holders; held 1 when held at all; now_us the server's time in us (the
--           client keeps its scores on the nodes' clock with it)
-- An empty queue and a free lock (the uncontended case) cost one ZRANGE more than acquire.lua, and
-- are granted before the queue's functions are defined (defining them costs the server more than
-- a command).
-- Includes: includes/queue.lua, includes/shared.lua (its own grant, without a token, is defined here)
local function grant(before_set)
  if before_set then before_set() end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
local mode = tonumber(ARGV[5])
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local holder  -- nil until read
if not first then
  holder = redis.pcall('GET', KEYS[1])
  if not holder then return grant(nil) end
end
--!include "includes/queue.lua"
--!include "includes/shared.lua"
local now, now_us = server_time()
if first then
  drop_lapsed(now)
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if holder == nil then holder = redis.pcall('GET', KEYS[1]) end
if type(holder) == 'table' then holder = lock_holder(now) end
local fair = mode == 1 or mode == 2
if not holder and fair and first and first ~= ARGV[3] then
  wake_sleeping_head(now, now_us, tonumber(ARGV[7]), ARGV[8], ARGV[3])
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if not holder and (not fair or first == nil or first == ARGV[3]) then
  return grant(function()
    if first and redis.call('ZREM', KEYS[3], ARGV[3]) == 1 then redis.call('ZREM', KEYS[4], ARGV[3]) end
  end)
end
local wait_ms
if holder then wait_ms = redis.call('PTTL', KEYS[1]) else wait_ms = first_lapses_in(now) end
if mode >= 2 then queue_member(ARGV[3], ARGV[4], math.max(wait_ms, 0) + tonumber(ARGV[6]), now, false) end
return {0, wait_ms, holder == true and 1 or 0, holder and 1 or 0, now_us}
