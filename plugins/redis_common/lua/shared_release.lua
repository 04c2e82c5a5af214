-- shared_release: releases a shared hold. The last shared holder out wakes the first waiter.
-- KEYS[1]  the lock key (the shared holders' sorted set)
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- KEYS[5]  the broadcast channel
-- ARGV[1]  owner token
-- ARGV[2]  claim_ms given to the woken waiter
-- ARGV[3]  the waiters' channel prefix ("": wake nobody by name, as on redlock)
-- ARGV[4]  the hold's fencing token ("" when the grant's reply was lost: found by owner)
-- Returns 1 released | 0 gone (no key, or no member of ours in the set) | -1 another holder's (an
-- exclusive holder's string at the key) | -2 our member present but expired (it is removed) | -3 a
-- break's tombstone at the key. A retry of a release whose answer was lost says RELEASED for 0 and
-- -1 (the lost attempt may have run, and a waiter it woke taken the name); -2 and -3 prove the
-- lost attempt never ran.
-- Includes: includes/queue.lua, includes/shared.lua, includes/member.lua
--!include "includes/queue.lua"
--!include "includes/shared.lua"
--!include "includes/member.lua"
local now, now_us = server_time()
local probe = redis.pcall('ZRANGE', KEYS[1], 0, 0)
if probe.err then return redis.call('GET', KEYS[1]) == 'dlock:broken' and -3 or -1 end  -- a string: a tombstone, or an exclusive holder's key
local member = find_member(ARGV[1], ARGV[4])
local score = member and redis.call('ZSCORE', KEYS[1], member)
if not score then return 0 end
redis.call('PUBLISH', KEYS[5], 'released')
redis.call('ZREM', KEYS[1], member)
if lock_holder(now) then
  expire_with_members(now, 0)
elseif ARGV[3] ~= '' then  -- '': no waiter listens on a channel of its own (redlock)
  drop_lapsed(now)
  wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
end
return tonumber(score) > now and 1 or -2
