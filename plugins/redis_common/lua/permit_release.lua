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
