-- queue_acquire: an exclusive hold with a waiter queue (first come, first served).
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key
-- KEYS[3]  the waiter queue (sorted set: entry -> arrival, server us)
-- KEYS[4]  the queue's lapses (sorted set: entry -> server ms it lapses)
-- ARGV[1]  owner token (also its queue entry)
-- ARGV[2]  ttl in ms
-- ARGV[3]  mode: 0 barging (the queue is ignored), 1 fair try (granted only when nobody queues or
--          we are first), 2 fair wait (as 1, and when not granted, queue us or renew our entry,
--          which then lapses ARGV[4] ms after the retry time returned)
-- ARGV[4]  entry_grace_ms
-- ARGV[5]  claim_ms: how long a woken waiter has to take the lock before its entry lapses
-- ARGV[6]  the waiters' channel prefix (a waiter's channel is prefix .. entry)
-- A fair try that finds the lock free but others first wakes the first waiter if nobody did
-- (wake_sleeping_head).
-- Returns
--   {1, token}       granted (our queue entry removed when we were first)
--   {0, wait_ms, 1}  held (exclusively or shared): wait_ms until the holder's key expires (-1: it has no expiry)
--   {0, wait_ms, 0}  free but others queue first: wait_ms until the first waiter's entry lapses
--   an error         as acquire.lua (another type, a fence key that holds no token)
-- The queue's keys expire with their longest-lived entry, so a queue nobody visits again vanishes.
-- The uncontended case (a free lock, nobody queued) is decided first, before the queue's functions
-- are defined (defining them costs the server more than a command), and costs one ZRANGE more
-- than acquire.lua; the server time is read only when needed.
-- Includes: includes/grant.lua, includes/queue.lua, includes/shared.lua
--!include "includes/grant.lua"
local mode = tonumber(ARGV[3])
local first
if mode > 0 then first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] end
local held = redis.pcall('GET', KEYS[1])
if not held and not first then return grant(nil) end
--!include "includes/queue.lua"
--!include "includes/shared.lua"
local now, now_us
if first then
  now, now_us = server_time()
  if drop_lapsed(now) then first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] end
end
if type(held) == 'table' then
  if not now then now, now_us = server_time() end
  held = lock_holder(now)
end
if not held and mode > 0 and first and first ~= ARGV[1] then
  wake_sleeping_head(now, now_us, tonumber(ARGV[5]), ARGV[6], ARGV[1])
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if not held and (mode == 0 or first == nil or first == ARGV[1]) then
  return grant(function()
    if first == ARGV[1] then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
  end)
end
if not now then now, now_us = server_time() end
local wait_ms
if held then
  wait_ms = redis.call('PTTL', KEYS[1])
else
  wait_ms = first_lapses_in(now)
end
if mode == 2 then enqueue(ARGV[1], now, now_us, wait_ms, tonumber(ARGV[4])) end
return {0, wait_ms, held and 1 or 0}
