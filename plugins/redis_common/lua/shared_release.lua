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
