-- permit_release: releases a permit; wakes as many waiters as permits are free.
-- KEYS[1]  the semaphore's permits key
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- KEYS[5]  the broadcast channel
-- ARGV[1]  owner token
-- ARGV[2]  claim_ms given to woken waiters
-- ARGV[3]  the waiters' channel prefix
-- ARGV[4]  the permit's fencing token ("" when unknown: found by owner)
-- Returns 1 released | 0 gone (no set, or no member of ours: broken, or dropped once expired) |
-- -2 our member present but expired (it is removed): as shared_release.lua.
-- Includes: includes/queue.lua, includes/shared.lua, includes/semaphore.lua, includes/member.lua
--!include "includes/queue.lua"
--!include "includes/shared.lua"
--!include "includes/semaphore.lua"
--!include "includes/member.lua"
local now, now_us = server_time()
local member = find_member(ARGV[1], ARGV[4])
local score = member and redis.call('ZSCORE', KEYS[1], member)
if not score then return 0 end
redis.call('PUBLISH', KEYS[5], 'released')
redis.call('ZREM', KEYS[1], member)
drop_lapsed(now)
wake_first(permits_free(now), now, now_us, tonumber(ARGV[2]), ARGV[3])
expire_with_members(now, last_lapse_in(now))
return tonumber(score) > now and 1 or -2
