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
