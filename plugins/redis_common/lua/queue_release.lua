-- queue_release: releases an exclusive hold and wakes the first queued waiter (wake_next); the
-- broadcast channel KEYS[5] still wakes barging waiters. DEL last: see release.lua.
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- KEYS[5]  the broadcast channel
-- ARGV[1]  owner token
-- ARGV[2]  claim_ms given to the woken waiter
-- ARGV[3]  the waiters' channel prefix
-- Returns 1 released | 0 gone (no key) | -1 another holder's (a value, a set of shared holders) |
-- -3 a break's tombstone (redis_common.hpp break_tombstone). A retry of a release
-- whose answer was lost says RELEASED for 0 and -1 (the lost attempt may have deleted the key, and
-- a waiter it woke taken the name); -3 proves the lost attempt did not run (a break found our key,
-- or a later holder's).
-- Nobody queued (the uncontended case): released before the queue's functions are defined.
-- Includes: includes/queue.lua
local v = redis.pcall('GET', KEYS[1])  -- a set (shared holders) is an error reply: not ours either
if v ~= ARGV[1] then return v == 'dlock:broken' and -3 or v and -1 or 0 end
redis.call('PUBLISH', KEYS[5], 'released')
if redis.call('ZRANGE', KEYS[3], 0, 0)[1] == nil then
  redis.call('DEL', KEYS[1])
  return 1
end
--!include "includes/queue.lua"
local now, now_us = server_time()
drop_lapsed(now)
wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
redis.call('DEL', KEYS[1])
return 1
