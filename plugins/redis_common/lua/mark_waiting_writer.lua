--!include "includes/queue.lua"
local now, now_us = server_time()
drop_lapsed(now)
if ARGV[3] == 'unmark' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
else
  enqueue(ARGV[1], now, now_us, 0, tonumber(ARGV[2]))
end
return 1
