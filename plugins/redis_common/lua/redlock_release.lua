local giving_back = ARGV[7] == 'give back'
local queued = redis.call('ZRANGE', KEYS[3], 0, 0)[1] ~= nil
if not queued and not giving_back then
  local v = redis.pcall('GET', KEYS[1])
  if v ~= ARGV[1] then return v == 'dlock:broken' and -3 or v and -1 or 0 end
  redis.call('PUBLISH', KEYS[5], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
--!include "includes/queue.lua"
if queued and not giving_back and ARGV[4] ~= '' and tonumber(redis.call('ZSCORE', KEYS[3], ARGV[4])) == tonumber(ARGV[5]) then
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then return v == 'dlock:broken' and -3 or v and -1 or 0 end
redis.call('PUBLISH', KEYS[5], 'released')
local now, now_us = server_time()
if giving_back and ARGV[4] ~= '' then queue_member(ARGV[4], ARGV[5], tonumber(ARGV[6]), now, false) end
drop_lapsed(now)
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if first and not (giving_back and first == ARGV[4]) then wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3]) end
redis.call('DEL', KEYS[1])
return 1
